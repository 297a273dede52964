package main

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// GoBench is one result line of `go test -bench` output: the benchmark's
// name as printed and its metrics by unit ("ns/op", "B/op", "allocs/op" and
// every b.ReportMetric unit: "ns/record", "bytes/key", ...).
type GoBench struct {
	Name    string
	Metrics map[string]float64
}

// ParseGoBench reads `go test -bench` output (several packages and -count
// repetitions welcome) and returns its result lines in order. Other lines
// are skipped; a result line whose value does not parse is an error.
func ParseGoBench(r io.Reader) ([]GoBench, error) {
	var out []GoBench
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// A benchmark's own log lines start with its name too; a result has
		// the iteration count second and value/unit pairs after it.
		f := strings.Fields(sc.Text())
		if len(f) < 4 || len(f)%2 != 0 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.ParseInt(f[1], 10, 64); err != nil {
			continue
		}
		b := GoBench{Name: f[0], Metrics: map[string]float64{}}
		for i := 2; i < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: value %q of %s: %w", sc.Text(), f[i], f[i+1], err)
			}
			b.Metrics[f[i+1]] = v
		}
		out = append(out, b)
	}
	return out, sc.Err()
}

// procsSuffix is the -GOMAXPROCS suffix go test adds when GOMAXPROCS > 1.
var procsSuffix = regexp.MustCompile(`-\d+$`)

// MedianOf is the median of the unit's values of every result named name
// (with or without the -GOMAXPROCS suffix) and how many there are.
func MedianOf(rs []GoBench, name, unit string) (float64, int, bool) {
	var vs []float64
	for _, r := range rs {
		if v, ok := r.Metrics[unit]; ok && (r.Name == name || procsSuffix.ReplaceAllString(r.Name, "") == name) {
			vs = append(vs, v)
		}
	}
	m, ok := Median(vs)
	return m, len(vs), ok
}

// Median is the median of vs (the mean of the middle two for an even
// count), which is also what benchstat centres its summaries on. ok is false
// for no values.
func Median(vs []float64) (m float64, ok bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Sorted(slices.Values(vs))
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2, true
}
