package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseProcStat(t *testing.T) {
	// A command name with a space and a ')' in it: fields are counted from
	// the last ')'. utime (field 14) = 1234, stime (field 15) = 567.
	line := "4242 (otel col) x) S 1 4242 4242 0 -1 4194560 2769 0 0 0 1234 567 0 0 20 0 12 0 123456 789012 3456 18446744073709551615\n"
	got, err := ParseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	if got != (ProcCPU{UTime: 1234, STime: 567}) {
		t.Fatalf("got %+v, want utime 1234 stime 567", got)
	}
	if got.Ticks() != 1801 {
		t.Fatalf("Ticks = %d, want 1801", got.Ticks())
	}
	if s := got.Seconds(100); s != 18.01 {
		t.Fatalf("Seconds(100) = %v, want 18.01", s)
	}
	if d := got.Sub(ProcCPU{UTime: 1000, STime: 500}); d != (ProcCPU{UTime: 234, STime: 67}) {
		t.Fatalf("Sub = %+v", d)
	}
	for _, bad := range []string{"", "1 (x S 1 2", "1 (x) S 1 2 3", "1 (x) S 1 2 3 4 5 6 7 8 9 10 abc 5 6"} {
		if _, err := ParseProcStat(bad); err == nil {
			t.Errorf("ParseProcStat(%q): no error", bad)
		}
	}
}

func TestReadProcCPUSelf(t *testing.T) {
	// Exact values are unknowable; the parse of a real file must succeed.
	if _, err := ReadProcCPU(1); err != nil {
		t.Fatal(err)
	}
}

const statusSample = `Name:	otelcol-dedup
Umask:	0022
State:	S (sleeping)
VmPeak:	 1912344 kB
VmSize:	 1912344 kB
VmHWM:	   81236 kB
VmRSS:	   80012 kB
Threads:	12
`

func TestParseStatusKB(t *testing.T) {
	for _, c := range []struct {
		name string
		want int64
	}{
		{"VmHWM", 81236 * 1024},
		{"VmRSS", 80012 * 1024},
		{"VmPeak", 1912344 * 1024},
	} {
		got, err := ParseStatusKB(strings.NewReader(statusSample), c.name)
		if err != nil || got != c.want {
			t.Errorf("%s = %d, %v; want %d", c.name, got, err, c.want)
		}
	}
	if _, err := ParseStatusKB(strings.NewReader(statusSample), "VmSwap"); err == nil {
		t.Error("missing line: no error")
	}
	if _, err := ParseStatusKB(strings.NewReader(statusSample), "Threads"); err == nil {
		t.Error("a line without kB: no error")
	}
	mem, err := ParseStatusKB(strings.NewReader("MemTotal:       24608580 kB\nMemFree: 1 kB\n"), "MemTotal")
	if err != nil || mem != 24608580*1024 {
		t.Errorf("MemTotal = %d, %v", mem, err)
	}
}

func TestParseLoadAvg(t *testing.T) {
	got, err := ParseLoadAvg("0.42 1.50 3.75 2/181 9876\n")
	if err != nil {
		t.Fatal(err)
	}
	if got != (LoadAvg{0.42, 1.5, 3.75}) {
		t.Fatalf("got %+v", got)
	}
	if got.String() != "0.42 1.50 3.75" {
		t.Fatalf("String = %q", got.String())
	}
	for _, bad := range []string{"", "0.1 0.2", "a b c"} {
		if _, err := ParseLoadAvg(bad); err == nil {
			t.Errorf("ParseLoadAvg(%q): no error", bad)
		}
	}
}

func TestParseCPUInfo(t *testing.T) {
	in := "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 7B13\n"
	model, cpus, err := ParseCPUInfo(strings.NewReader(in))
	if err != nil || model != "AMD EPYC 7B13" || cpus != 2 {
		t.Fatalf("got %q, %d, %v", model, cpus, err)
	}
}

func TestWaitForQuiet(t *testing.T) {
	reads := func(loads ...float64) func() (LoadAvg, error) {
		i := 0
		return func() (LoadAvg, error) {
			l := LoadAvg{One: loads[min(i, len(loads)-1)]}
			i++
			return l, nil
		}
	}
	var slept time.Duration
	sleep := func(d time.Duration) { slept += d }

	// Quiet on the third reading: two sleeps.
	l, quiet, err := WaitForQuiet(1.0, time.Minute, 15*time.Second, reads(2.5, 1.0, 0.7), sleep, nil)
	if err != nil || !quiet || l.One != 0.7 || slept != 30*time.Second {
		t.Fatalf("got %v %v %v after %v; want 0.7 quiet after 30s", l, quiet, err, slept)
	}
	// Never quiet: gives up after the bound with the last reading.
	slept = 0
	var logged int
	l, quiet, err = WaitForQuiet(1.0, time.Minute, 15*time.Second, reads(3), sleep, func(LoadAvg, time.Duration) { logged++ })
	if err != nil || quiet || l.One != 3 || slept != time.Minute || logged != 4 {
		t.Fatalf("got %v %v %v after %v, %d logs; want 3, not quiet, after 1m, 4 logs", l, quiet, err, slept, logged)
	}
	// A zero bound reads once.
	slept = 0
	_, quiet, _ = WaitForQuiet(1.0, 0, 15*time.Second, reads(3), sleep, nil)
	if quiet || slept != 0 {
		t.Fatalf("zero wait: quiet %v, slept %v", quiet, slept)
	}
}

func TestCountGCLines(t *testing.T) {
	log := "2026-11-22T01:00:00Z info service started\n" +
		"gc 1 @0.012s 2%: 0.011+1.2+0.003 ms clock, 0.022+0.1/0.9/0+0.006 ms cpu, 4->4->1 MB, 4 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"gc 2 @0.050s 3%: 0.010+1.0+0.002 ms clock, 0.020+0/0.8/0+0.004 ms cpu, 4->4->2 MB, 5 MB goal, 0 MB stacks, 0 MB globals, 2 P\n" +
		"a gc 3 @x line that is not one\n" +
		"gc x @1s\n" +
		"gc 3 @0.090s 3%: 0.010+1.0+0.002 ms clock, 4->4->2 MB, 5 MB goal, 2 P (forced)\n"
	if n := CountGCLines(log); n != 3 {
		t.Fatalf("CountGCLines = %d, want 3", n)
	}
}

func TestParseCPUStat(t *testing.T) {
	a, err := ParseCPUStat("cpu  650204 0 125888 445004 4459 0 4849 275 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	if a != (CPUStat{Total: 650204 + 125888 + 445004 + 4459 + 4849 + 275, Idle: 445004 + 4459}) {
		t.Fatalf("got %+v", a)
	}
	b, err := ParseCPUStat("cpu  650704 0 126088 445204 4459 0 4849 275 0 0\n")
	if err != nil {
		t.Fatal(err)
	}
	// 900 ticks passed, 200 of them idle.
	if got := b.Busy(a); got != 700.0/900 {
		t.Fatalf("Busy = %v, want %v", got, 700.0/900)
	}
	if got := a.Busy(a); got != 0 {
		t.Fatalf("Busy over no time = %v", got)
	}
	for _, bad := range []string{"", "intr 1 2 3", "cpu 1 2 x 4 5"} {
		if _, err := ParseCPUStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
