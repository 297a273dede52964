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

// GoBench is one result line of `go test -bench` output.
type GoBench struct {
	Pkg        string // from the preceding "pkg:" line
	Name       string // as printed, with the -GOMAXPROCS suffix if any
	Iterations int64
	// Metrics by unit: "ns/op", "B/op", "allocs/op" and every
	// b.ReportMetric unit ("ns/record", "bytes/key", ...).
	Metrics map[string]float64
}

// ParseGoBench reads `go test -bench` output (several packages and -count
// repetitions welcome) and returns its result lines in order. Other lines
// (goos:, PASS, ok, logs) are skipped; a result line that does not parse is
// an error.
func ParseGoBench(r io.Reader) ([]GoBench, error) {
	var out []GoBench
	pkg := ""
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimSpace(p)
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		f := strings.Fields(line)
		// A benchmark's own log lines also start with its name; a result
		// has the iteration count second and value/unit pairs after it.
		if len(f) < 4 || len(f)%2 != 0 {
			continue
		}
		iters, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		b := GoBench{Pkg: pkg, Name: f[0], Iterations: iters, Metrics: map[string]float64{}}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: value %q of %s: %w", n, f[i], f[i+1], err)
			}
			b.Metrics[f[i+1]] = v
		}
		out = append(out, b)
	}
	return out, sc.Err()
}

var procsSuffix = regexp.MustCompile(`-\d+$`)

// BaseName drops the -GOMAXPROCS suffix go test adds when GOMAXPROCS > 1.
func BaseName(name string) string { return procsSuffix.ReplaceAllString(name, "") }

// Values returns the unit's values of every result named name (with or
// without the -GOMAXPROCS suffix), in order.
func Values(rs []GoBench, name, unit string) []float64 {
	var vs []float64
	for _, r := range rs {
		if r.Name != name && BaseName(r.Name) != name {
			continue
		}
		if v, ok := r.Metrics[unit]; ok {
			vs = append(vs, v)
		}
	}
	return vs
}

// Median is the median of vs (the mean of the middle two for an even
// count), which is also what benchstat centres its summaries on. ok is false
// for no values.
func Median(vs []float64) (m float64, ok bool) {
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// MedianOf is Median(Values(rs, name, unit)).
func MedianOf(rs []GoBench, name, unit string) (float64, int, bool) {
	vs := Values(rs, name, unit)
	m, ok := Median(vs)
	return m, len(vs), ok
}
