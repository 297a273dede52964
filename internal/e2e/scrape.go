package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Labels are a series' label pairs; as a filter, a subset to match.
type Labels map[string]string

// Series is one sample of the Prometheus text exposition format.
type Series struct {
	Name   string
	Labels Labels
	Value  float64
}

func (s Series) String() string {
	keys := slices.Sorted(maps.Keys(s.Labels))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%q", k, s.Labels[k])
	}
	return fmt.Sprintf("%s{%s} %g", s.Name, strings.Join(parts, ","), s.Value)
}

// Scrape is every series of one scrape.
type Scrape []Series

// Find returns the series called name whose labels include every pair of
// filter.
func (sc Scrape) Find(name string, filter Labels) []Series {
	var out []Series
	for _, s := range sc {
		if s.Name == name && s.Labels.include(filter) {
			out = append(out, s)
		}
	}
	return out
}

// Sum adds the values of the series Find returns; 0 when there are none (a
// counter that was never incremented is not exported).
func (sc Scrape) Sum(name string, filter Labels) float64 {
	var v float64
	for _, s := range sc.Find(name, filter) {
		v += s.Value
	}
	return v
}

// Names returns the distinct series names with the given prefix, sorted.
func (sc Scrape) Names(prefix string) []string {
	seen := map[string]bool{}
	for _, s := range sc {
		if strings.HasPrefix(s.Name, prefix) {
			seen[s.Name] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func (l Labels) include(filter Labels) bool {
	for k, v := range filter {
		if got, ok := l[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// ScrapeMetrics fetches url (a collector's internal metrics endpoint) and
// parses the Prometheus text format.
func ScrapeMetrics(ctx context.Context, url string) (Scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The classic text format; OpenMetrics would add _total and EOF lines.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	// A client of its own, closed at once: nothing lingers for goleak.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2e: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("e2e: scrape %s: status %s", url, resp.Status)
	}
	sc, err := ParsePrometheusText(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("e2e: scrape %s: %w", url, err)
	}
	return sc, nil
}

// ParsePrometheusText parses the Prometheus text exposition format (version
// 0.0.4): comments are skipped, every sample line becomes a Series.
func ParsePrometheusText(r io.Reader) (Scrape, error) {
	var sc Scrape
	scanner := bufio.NewScanner(r)
	scanner.Buffer(make([]byte, 64<<10), 4<<20)
	for lineNo := 1; scanner.Scan(); lineNo++ {
		line := strings.TrimSpace(scanner.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, fmt.Errorf("line %d %q: %w", lineNo, line, err)
		}
		sc = append(sc, s)
	}
	return sc, scanner.Err()
}

func parseSample(line string) (Series, error) {
	s := Series{Labels: Labels{}}
	i := strings.IndexAny(line, "{ \t")
	if i <= 0 {
		return s, fmt.Errorf("no value")
	}
	s.Name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		n, err := parseLabels(rest[1:], s.Labels)
		if err != nil {
			return s, err
		}
		rest = rest[1+n:]
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 || len(fields) > 2 { // value [timestamp]
		return s, fmt.Errorf("want a value and an optional timestamp")
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return s, err
	}
	s.Value = v
	return s, nil
}

// parseLabels reads `k="v",...}` into into and returns the bytes consumed,
// the closing brace included.
func parseLabels(in string, into Labels) (int, error) {
	i := 0
	for {
		for i < len(in) && (in[i] == ' ' || in[i] == ',') {
			i++
		}
		if i < len(in) && in[i] == '}' {
			return i + 1, nil
		}
		eq := strings.IndexByte(in[i:], '=')
		if eq <= 0 {
			return 0, fmt.Errorf("bad label at %q", in[i:])
		}
		key := strings.TrimSpace(in[i : i+eq])
		i += eq + 1
		if i >= len(in) || in[i] != '"' {
			return 0, fmt.Errorf("label %s: value not quoted", key)
		}
		i++
		var val strings.Builder
		for {
			if i >= len(in) {
				return 0, fmt.Errorf("label %s: unterminated value", key)
			}
			c := in[i]
			i++
			if c == '"' {
				break
			}
			if c == '\\' && i < len(in) {
				switch in[i] {
				case 'n':
					c = '\n'
				default: // \\ and \"
					c = in[i]
				}
				i++
			}
			val.WriteByte(c)
		}
		into[key] = val.String()
	}
}
