package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// Summary is what a run delivered. Its JSON form is dedupload's summary line.
type Summary struct {
	Sent   int64 `json:"sent"`   // records acknowledged by the endpoint
	Unique int64 `json:"unique"` // distinct identities among them
	// Duplicates is Sent - Unique: the acknowledged records a dedup must
	// drop, round(records*duplicates) when everything was acknowledged.
	Duplicates int64 `json:"duplicates"`
	Requests   int64 `json:"requests"` // each counted once however often it was retried
	Retries    int64 `json:"retries"`  // re-sends: the endpoint saw Requests+Retries attempts
	// Errors is the requests that finally failed (a non-retryable error,
	// retries exhausted or stopped, a partial success), FailedRecords their
	// records that were not acknowledged.
	Errors           int64   `json:"errors"`
	FailedRecords    int64   `json:"failed_records"`
	Seconds          float64 `json:"seconds"`
	RecordsPerSecond float64 `json:"records_per_second"` // Sent / Seconds
	Seed             uint64  `json:"seed"`
	// Ground truth of the acknowledged copies, by where their original was
	// generated: the same request, an earlier request of the same sender,
	// a request of another sender.
	CopiesInBatch     int64 `json:"copies_in_batch"`
	CopiesSameSender  int64 `json:"copies_same_sender"`
	CopiesOtherSender int64 `json:"copies_other_sender"`
	// The median and 99th percentile of the acknowledged requests'
	// latencies, in seconds: from the first attempt to the acknowledgement.
	LatencyP50 float64 `json:"latency_p50_seconds"`
	LatencyP99 float64 `json:"latency_p99_seconds"`
	LastError  string  `json:"last_error,omitempty"`
}

// JSON is the summary as one line of JSON (no newline).
func (s Summary) JSON() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Run sends cfg's stream and returns what was delivered. It returns an error
// only for an invalid configuration or an endpoint it cannot use, or, with
// the partial summary, ctx's error if ctx ended the run (requests in flight
// are then cut and counted as errors). Failed requests are counted in the
// summary, not returned.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	gen, err := NewGenerator(cfg)
	if err != nil {
		return Summary{}, err
	}
	cfg = cfg.Defaults()
	r := &runner{cfg: cfg, gen: gen, ctx: ctx, stop: make(chan struct{}), seen: make([]uint64, (gen.Uniques()+63)/64)}
	defer func() {
		for _, c := range r.clients {
			_ = c.Close()
		}
	}()
	for _, ep := range strings.Split(cfg.Endpoint, ",") {
		c, err := otlp.NewClient(cfg.Protocol, strings.TrimSpace(ep))
		if err != nil {
			return Summary{}, err
		}
		c.Gzip, c.Header = cfg.Compression == "gzip", http.Header{}
		for k, v := range cfg.Headers {
			c.Header.Set(k, v)
		}
		r.clients = append(r.clients, c)
	}
	if cfg.Rate > 0 {
		r.pace = &pacer{per: float64(time.Second) / cfg.Rate}
	}

	start := time.Now()
	done := make(chan struct{}) // ends the watchers
	var watch sync.WaitGroup
	watch.Go(func() {
		if cfg.Duration > 0 {
			t := time.AfterFunc(cfg.Duration, func() { r.stopOnce.Do(func() { close(r.stop) }) })
			defer t.Stop()
		}
		select {
		case <-ctx.Done():
		case <-cfg.Stop:
		case <-done:
			return
		}
		r.stopOnce.Do(func() { close(r.stop) })
	})
	if cfg.Progress != nil {
		watch.Go(func() { r.progress(start, done) })
	}
	var senders sync.WaitGroup
	for s := range cfg.Senders {
		senders.Go(func() { r.sender(s) })
	}
	senders.Wait()
	elapsed := time.Since(start)
	close(done)
	watch.Wait()
	return r.summary(elapsed), ctx.Err()
}

type runner struct {
	cfg      Config
	gen      *Generator
	clients  []*otlp.Client  // one per endpoint: each request goes to all
	ctx      context.Context // ends the run and cuts requests in flight
	stop     chan struct{}   // ends the run: no new request, no retry
	stopOnce sync.Once
	pace     *pacer

	seen []uint64 // bitset of acknowledged identities

	sent, requests, retries, errors, failed atomic.Int64
	inBatch, sameSender, otherSender        atomic.Int64
	lastErr                                 atomic.Pointer[string]

	latMu     sync.Mutex
	latencies []time.Duration // of acknowledged requests
}

// stopped reports whether the run was told to stop (Stop and ctx are
// checked too, so that a run told to stop before it started sends nothing).
func (r *runner) stopped() bool {
	select {
	case <-r.stop:
	case <-r.cfg.Stop:
	case <-r.ctx.Done():
	default:
		return false
	}
	return true
}

// sleep waits d, or less if the run stops; it reports whether it waited d.
func (r *runner) sleep(d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return !r.stopped()
	case <-r.stop:
		return false
	}
}

// sender sends batches s, s+Senders, s+2*Senders, ... in order.
func (r *runner) sender(s int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(s)+1)) // backoff jitter
	for b := int64(s); b < r.gen.Batches(); b += int64(r.cfg.Senders) {
		if r.stopped() || r.pace != nil && !r.sleep(time.Until(r.pace.reserve(r.gen.BatchLen(b)))) {
			return
		}
		r.send(r.gen.Batch(b), rng)
	}
}

// send delivers one batch, retrying like an exporter.
func (r *runner) send(b *Batch, rng *rand.Rand) {
	r.requests.Add(1)
	retry := r.cfg.Retry
	first, interval := time.Now(), retry.InitialInterval
	for {
		ctx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
		rejected, err := r.export(ctx, b.Logs)
		cancel()
		if err == nil {
			r.ack(b, rejected, time.Since(first))
			return
		}
		again, throttle := otlp.Retryable(err)
		delay := interval
		if f := retry.RandomizationFactor; f > 0 {
			delay = time.Duration(float64(interval) * (1 - f + rng.Float64()*2*f))
		}
		delay = max(delay, throttle)
		interval = min(time.Duration(float64(interval)*retry.Multiplier), retry.MaxInterval)
		if !again || retry.Disabled || r.ctx.Err() != nil ||
			retry.MaxElapsedTime > 0 && time.Since(first)+delay > retry.MaxElapsedTime || !r.sleep(delay) {
			r.fail(int64(len(b.Truth)), err.Error())
			return
		}
		r.retries.Add(1)
	}
}

// export sends a request to every endpoint at the same moment, so that
// copies race across a fleet: an attempt succeeds when every endpoint
// accepted it, and a retry goes to all of them again.
func (r *runner) export(ctx context.Context, ld plog.Logs) (int64, error) {
	rejected := make([]int64, len(r.clients))
	errs := make([]error, len(r.clients))
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() { rejected[i], errs[i] = c.ExportLogs(ctx, ld) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return slices.Max(rejected), nil
}

func (r *runner) ack(b *Batch, rejected int64, latency time.Duration) {
	r.latMu.Lock()
	r.latencies = append(r.latencies, latency)
	r.latMu.Unlock()
	for _, t := range b.Truth {
		atomic.OrUint64(&r.seen[t.ID>>6], 1<<(t.ID&63))
	}
	rejected = min(max(rejected, 0), int64(len(b.Truth)))
	r.sent.Add(int64(len(b.Truth)) - rejected)
	r.inBatch.Add(b.InBatch)
	r.sameSender.Add(b.SameSender)
	r.otherSender.Add(b.OtherSender)
	if rejected > 0 {
		// The response does not say which records were rejected: the
		// identities above count the whole batch as delivered.
		r.fail(rejected, "partial success: records rejected by the endpoint")
	}
}

func (r *runner) fail(records int64, msg string) {
	r.errors.Add(1)
	r.failed.Add(records)
	r.lastErr.Store(&msg)
}

func (r *runner) summary(elapsed time.Duration) Summary {
	s := Summary{
		Sent: r.sent.Load(), Requests: r.requests.Load(), Retries: r.retries.Load(), Errors: r.errors.Load(),
		FailedRecords: r.failed.Load(), Seconds: elapsed.Seconds(), Seed: r.cfg.Seed,
		CopiesInBatch: r.inBatch.Load(), CopiesSameSender: r.sameSender.Load(), CopiesOtherSender: r.otherSender.Load(),
	}
	for i := range r.seen {
		s.Unique += int64(bits.OnesCount64(atomic.LoadUint64(&r.seen[i])))
	}
	s.Duplicates = max(s.Sent-s.Unique, 0)
	if s.Seconds > 0 {
		s.RecordsPerSecond = float64(s.Sent) / s.Seconds
	}
	if p := r.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	r.latMu.Lock()
	defer r.latMu.Unlock()
	slices.Sort(r.latencies)
	// Nearest-rank percentiles; 0 if nothing was acknowledged.
	for q, out := range map[float64]*float64{0.50: &s.LatencyP50, 0.99: &s.LatencyP99} {
		if n := len(r.latencies); n > 0 {
			*out = r.latencies[min(max(int(math.Ceil(q*float64(n)))-1, 0), n-1)].Seconds()
		}
	}
	return s
}

// pacer spreads records over time at a fixed rate for all senders: each
// batch reserves the slot after the previous one. A pacer that fell behind
// does not catch up in a burst.
type pacer struct {
	mu   sync.Mutex
	next time.Time
	per  float64 // nanoseconds per record
}

func (p *pacer) reserve(n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = at.Add(time.Duration(float64(n) * p.per))
	return at
}

// progress redraws a one-line progress bar on cfg.Progress until done.
func (r *runner) progress(start time.Time, done <-chan struct{}) {
	w := r.cfg.Progress
	t := time.NewTicker(r.cfg.ProgressInterval)
	defer t.Stop()
	lastSent, lastAt := int64(0), start
	for now := start; ; {
		sent := r.sent.Load()
		rate := float64(sent-lastSent) / max(now.Sub(lastAt).Seconds(), 1e-9)
		lastSent, lastAt = sent, now
		fmt.Fprint(w, "\r"+ProgressLine(sent, r.gen.Records(), rate, r.retries.Load(), r.errors.Load(), now.Sub(start))+"\033[K")
		select {
		case <-done:
			fmt.Fprint(w, "\r\033[K")
			return
		case now = <-t.C:
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
	s := fmt.Sprint(max(n, -n))
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if n < 0 {
		return "-" + s
	}
	return s
}
