package main

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// FuncCPU is one function's CPU time in a profile: Flat in the function
// itself, Cum with what it calls.
type FuncCPU struct{ Flat, Cum time.Duration }

// ParsePprofTop reads `go tool pprof -top` output into CPU time by function.
func ParsePprofTop(r io.Reader) (map[string]FuncCPU, error) {
	out := map[string]FuncCPU{}
	sc := bufio.NewScanner(r)
	header := false
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if !header {
			header = len(f) >= 5 && f[0] == "flat" && f[1] == "flat%"
			continue
		}
		if len(f) < 6 {
			continue
		}
		flat, err1 := time.ParseDuration(f[0])
		cum, err2 := time.ParseDuration(f[3])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("pprof -top: bad line %q", sc.Text())
		}
		name := shortName(strings.Join(f[5:], " "))
		prev := out[name]
		out[name] = FuncCPU{Flat: prev.Flat + flat, Cum: max(prev.Cum, cum)}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !header {
		return nil, fmt.Errorf("pprof -top: no header line")
	}
	return out, nil
}

// ProfileDiff is the table of the n functions whose CPU per record (flat,
// or cumulative if cum) differs most between the modes' profiles and the
// first mode's (the pass-through), in nanoseconds per record; each mode's
// profile is divided by the records of its run. A row of all functions'
// flat CPU comes first.
func ProfileDiff(modes []string, profiles []map[string]FuncCPU, records []int64, n int, cum bool) string {
	per := func(d time.Duration, i int) float64 { return float64(d.Nanoseconds()) / float64(records[i]) }
	val := func(p map[string]FuncCPU, name string) time.Duration {
		if cum {
			return p[name].Cum
		}
		return p[name].Flat
	}
	names := map[string]bool{}
	totals := make([]float64, len(modes))
	for i, p := range profiles {
		for name, fc := range p {
			names[name] = true
			totals[i] += per(fc.Flat, i)
		}
	}
	diff := func(name string) float64 {
		base := per(val(profiles[0], name), 0)
		d := 0.0
		for i := 1; i < len(profiles); i++ {
			d = max(d, math.Abs(per(val(profiles[i], name), i)-base))
		}
		return d
	}
	sorted := slices.SortedFunc(maps.Keys(names), func(a, b string) int { return cmp.Or(cmp.Compare(diff(b), diff(a)), strings.Compare(a, b)) })
	var b strings.Builder
	kind := "flat"
	if cum {
		kind = "cumulative"
	}
	fmt.Fprintf(&b, "| function (%s CPU, ns per record) |", kind)
	for _, m := range modes {
		fmt.Fprintf(&b, " %s |", m)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: |", len(modes)) + "\n| **all functions** |")
	for _, t := range totals {
		fmt.Fprintf(&b, " **%.0f** |", t)
	}
	b.WriteString("\n")
	for _, name := range sorted[:min(n, len(sorted))] {
		fmt.Fprintf(&b, "| `%s` |", name)
		for i, p := range profiles {
			fmt.Fprintf(&b, " %.1f |", per(val(p, name), i))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// shortName drops the type arguments of a generic function's name
// ("queue.(*asyncQueue[go.shape.interface { ... }]).Start" becomes
// "queue.(*asyncQueue[...]).Start") and pprof's " (inline)" mark, so that
// the table stays readable and an inlined copy adds to its function.
func shortName(name string) string {
	name = strings.TrimSuffix(name, " (inline)")
	var b strings.Builder
	depth := 0
	for _, r := range name {
		switch {
		case r == '[':
			if depth == 0 {
				b.WriteString("[...]")
			}
			depth++
		case r == ']':
			depth--
		case depth == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}
