package e2e

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Labels are a series' label pairs; as a filter, a subset to match.
type Labels map[string]string

// Series is one sample of a scrape.
type Series struct {
	Name   string
	Labels Labels
	Value  float64
}

func (s Series) String() string {
	parts := make([]string, 0, len(s.Labels))
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, s.Labels[k]))
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
		match := s.Name == name
		for k, v := range filter {
			if got, ok := s.Labels[k]; !ok || got != v {
				match = false
			}
		}
		if match {
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
	var names []string
	for _, s := range sc {
		if strings.HasPrefix(s.Name, prefix) && !slices.Contains(names, s.Name) {
			names = append(names, s.Name)
		}
	}
	slices.Sort(names)
	return names
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
// 0.0.4) into one Series per sample: a histogram's _bucket, _sum and _count.
func ParsePrometheusText(r io.Reader) (Scrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var sc Scrape
	for _, name := range slices.Sorted(maps.Keys(families)) {
		samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, families[name])
		if err != nil {
			return nil, err
		}
		for _, smp := range samples {
			s := Series{Labels: Labels{}, Value: float64(smp.Value)}
			for k, v := range smp.Metric {
				if k == model.MetricNameLabel {
					s.Name = string(v)
				} else {
					s.Labels[string(k)] = string(v)
				}
			}
			sc = append(sc, s)
		}
	}
	return sc, nil
}
