package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit"
)

// sampleProc writes a proc file system of sample files: process 4242 (a
// command name with a space and a ')' in it), the load, the CPU times, two
// CPUs and the memory.
func sampleProc(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{
		// utime (field 14) = 1234, stime (field 15) = 567 ticks of 1/100 s.
		"4242/stat": "4242 (otel col) x) S 1 4242 4242 0 -1 4194560 2769 0 0 0 1234 567 0 0 20 0 12 0 123456 789012 3456 18446744073709551615 " +
			"94592431345664 94592431365545 140725379876544 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 94592431381552 94592431383168 94593465847808 140725379877377 140725379877397 140725379877397 140725379878891 0\n",
		"4242/status": "Name:\totelcol-dedup\nUmask:\t0022\nState:\tS (sleeping)\nVmPeak:\t 1912344 kB\nVmSize:\t 1912344 kB\n" +
			"VmHWM:\t   81236 kB\nVmRSS:\t   80012 kB\nThreads:\t12\n",
		// Two threads: 100 + 20 and 7 + 3 context switches.
		"4343/stat":   "4343 (idle) S 1 4343 4343 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 1 1 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"4343/status": "Name:\tidle\nThreads:\t1\n",
		"loadavg":     "0.42 1.50 3.75 2/181 9876\n",
		"stat": "cpu  650204 0 125888 445004 4459 0 4849 275 0 0\ncpu0 325102 0 62944 222502 2229 0 2424 137 0 0\n" +
			"cpu1 325102 0 62944 222502 2230 0 2425 138 0 0\nintr 1 2 3\nctxt 100\nbtime 1763900000\nprocesses 50\nprocs_running 1\nprocs_blocked 0\n",
		"cpuinfo": "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu\n\nprocessor\t: 1\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\nflags\t\t: fpu\n\n",
		"meminfo": "MemTotal:       24608580 kB\nMemFree:         1000000 kB\n",
	}
	for name, text := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestHostReadsSampleFiles(t *testing.T) {
	h, err := newHost(sampleProc(t))
	if err != nil {
		t.Fatal(err)
	}
	if cpu, err := h.procCPU(4242); err != nil || cpu != 18010*time.Millisecond {
		t.Errorf("procCPU(4242) = %v, %v; want 18.01s", cpu, err)
	}
	if peak, now, err := h.rss(4242); err != nil || peak != 81236*1024 || now != 80012*1024 {
		t.Errorf("rss(4242) = %d, %d, %v; want %d, %d", peak, now, err, 81236*1024, 80012*1024)
	}
	if _, _, err := h.rss(4343); err == nil {
		t.Error("rss of a status without VmHWM: no error")
	}
	if _, err := h.procCPU(99999); err == nil {
		t.Error("procCPU of a missing process: no error")
	}
	l, err := h.loadAvg()
	if err != nil || l != (LoadAvg{0.42, 1.5, 3.75}) || l.String() != "0.42 1.50 3.75" {
		t.Errorf("loadAvg = %+v (%q), %v", l, l.String(), err)
	}
	if m, err := h.machine(); err != nil || m != "AMD EPYC 7B13, 2 cores, 23.5 GiB" {
		t.Errorf("machine = %q, %v", m, err)
	}
}

// TestThisHost reads the machine's own /proc: this process's CPU time
// grows while it computes, and its peak resident set covers memory it
// touched.
func TestThisHost(t *testing.T) {
	h, err := thisHost()
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	before, err := h.procCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	// However busy the machine, computing uses CPU time: compute until the
	// counter (in clock ticks) moves.
	x := uint64(1)
	testkit.WaitFor(t, "this process's CPU time growing while it computes", time.Minute, func() bool {
		for range 1_000_000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
		after, err := h.procCPU(pid)
		return err == nil && after > before
	}, func() string { return fmt.Sprint(x) })
	mem := make([]byte, 64<<20)
	for i := range mem {
		if i%4096 == 0 {
			mem[i] = 1
		}
	}
	peak, _, err := h.rss(pid)
	runtime.KeepAlive(mem)
	if err != nil || peak < 64<<20 {
		t.Errorf("peak RSS %d, %v after touching 64 MiB", peak, err)
	}
	if _, err := h.machine(); err != nil {
		t.Error(err)
	}
	if _, err := h.loadAvg(); err != nil {
		t.Error(err)
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
	var logged int
	log := func(LoadAvg, time.Duration) { logged++ }

	// Quiet on the third reading: two sleeps.
	l, quiet, err := waitForQuiet(1.0, time.Minute, 15*time.Second, reads(2.5, 1.0, 0.7), sleep, log)
	if err != nil || !quiet || l.One != 0.7 || slept != 30*time.Second {
		t.Fatalf("got %v %v %v after %v; want 0.7 quiet after 30s", l, quiet, err, slept)
	}
	// Never quiet: gives up after the bound with the last reading.
	slept, logged = 0, 0
	l, quiet, err = waitForQuiet(1.0, time.Minute, 15*time.Second, reads(3), sleep, log)
	if err != nil || quiet || l.One != 3 || slept != time.Minute || logged != 4 {
		t.Fatalf("got %v %v %v after %v, %d logs; want 3, not quiet, after 1m, 4 logs", l, quiet, err, slept, logged)
	}
	// A zero bound reads once.
	slept = 0
	_, quiet, _ = waitForQuiet(1.0, 0, 15*time.Second, reads(3), sleep, log)
	if quiet || slept != 0 {
		t.Fatalf("zero wait: quiet %v, slept %v", quiet, slept)
	}
}
