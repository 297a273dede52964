package loadgen

import (
	"fmt"
	"strings"
	"time"
)

// progress redraws a one-line progress bar on cfg.Progress until done.
func (r *runner) progress(start time.Time, done <-chan struct{}) {
	w := r.cfg.Progress
	t := time.NewTicker(r.cfg.ProgressInterval)
	defer t.Stop()
	lastSent, lastAt := int64(0), start
	draw := func(sent int64, rate float64, now time.Time) {
		fmt.Fprint(w, "\r"+ProgressLine(sent, r.gen.Records(), rate, r.retries.Load(), r.errors.Load(), now.Sub(start))+"\033[K")
	}
	draw(0, 0, start)
	for {
		select {
		case <-done:
			fmt.Fprint(w, "\r\033[K")
			return
		case now := <-t.C:
			sent := r.sent.Load()
			rate := float64(sent-lastSent) / now.Sub(lastAt).Seconds()
			lastSent, lastAt = sent, now
			draw(sent, rate, now)
		}
	}
}

// ProgressLine renders one state of the progress bar.
func ProgressLine(sent, total int64, rate float64, retries, errors int64, elapsed time.Duration) string {
	const width = 30
	frac := 0.0
	if total > 0 {
		frac = min(float64(sent)/float64(total), 1)
	}
	full := int(frac * width)
	bar := strings.Repeat("=", full)
	if full < width {
		bar += ">" + strings.Repeat(" ", width-full-1)
	}
	return fmt.Sprintf("[%s] %3.0f%% %s/%s records  %s rec/s  retries %s  errors %s  %s",
		bar, frac*100, Group(sent), Group(total), Group(int64(rate)), Group(retries), Group(errors),
		elapsed.Truncate(100*time.Millisecond))
}

// Group writes n with thousands separators: 1234567 -> 1,234,567.
func Group(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}
