package main

import (
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
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
	h, err := NewHost(sampleProc(t))
	if err != nil {
		t.Fatal(err)
	}
	if cpu, err := h.ProcCPU(4242); err != nil || cpu != 18010*time.Millisecond {
		t.Errorf("ProcCPU(4242) = %v, %v; want 18.01s", cpu, err)
	}
	if rss, err := h.PeakRSS(4242); err != nil || rss != 81236*1024 {
		t.Errorf("PeakRSS(4242) = %d, %v; want %d", rss, err, 81236*1024)
	}
	if _, err := h.PeakRSS(4343); err == nil {
		t.Error("PeakRSS of a status without VmHWM: no error")
	}
	if _, err := h.ProcCPU(99999); err == nil {
		t.Error("ProcCPU of a missing process: no error")
	}
	l, err := h.LoadAvg()
	if err != nil || l != (LoadAvg{0.42, 1.5, 3.75}) || l.String() != "0.42 1.50 3.75" {
		t.Errorf("LoadAvg = %+v (%q), %v", l, l.String(), err)
	}
	st, err := h.CPUStat()
	if err != nil {
		t.Fatal(err)
	}
	// Seconds: ticks of 1/100 s, user..steal in Total, idle + iowait in Idle.
	wantTotal := float64(650204+125888+445004+4459+4849+275) / 100
	wantIdle := float64(445004+4459) / 100
	if math.Abs(st.Total-wantTotal) > 1e-6 || math.Abs(st.Idle-wantIdle) > 1e-6 {
		t.Errorf("CPUStat = %+v, want Total %v Idle %v", st, wantTotal, wantIdle)
	}
	m, err := h.Machine()
	if err != nil || m != (Machine{CPUModel: "AMD EPYC 7B13", Cores: 2, MemBytes: 24608580 * 1024}) {
		t.Errorf("Machine = %+v, %v", m, err)
	}
}

func TestCPUStatBusy(t *testing.T) {
	a := CPUStat{Total: 1000, Idle: 400}
	// 9 s passed, 2 of them idle.
	if got := (CPUStat{Total: 1009, Idle: 402}).Busy(a); math.Abs(got-7.0/9) > 1e-12 {
		t.Fatalf("Busy = %v, want %v", got, 7.0/9)
	}
	if got := a.Busy(a); got != 0 {
		t.Fatalf("Busy over no time = %v", got)
	}
	// Idle time that grew by more than the total (iowait stepping back)
	// is an idle machine, not a negative load.
	if got := (CPUStat{Total: 1009, Idle: 410}).Busy(a); got != 0 {
		t.Fatalf("Busy with idle ahead of total = %v, want 0", got)
	}
}

// TestThisHost reads the machine's own /proc: this process's CPU time
// grows while it computes, and its peak resident set covers memory it
// touched.
func TestThisHost(t *testing.T) {
	pid := os.Getpid()
	before, err := ReadProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	x := uint64(1)
	for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
		for range 1000 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	after, err := ReadProcCPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU time %v after computing for 100 ms (x=%d), %v before", after, x, before)
	}
	mem := make([]byte, 64<<20)
	for i := range mem {
		if i%4096 == 0 {
			mem[i] = 1
		}
	}
	rss, err := ReadPeakRSS(pid)
	runtime.KeepAlive(mem)
	if err != nil || rss < 64<<20 {
		t.Errorf("peak RSS %d, %v after touching 64 MiB", rss, err)
	}
	m, err := ReadMachine()
	if err != nil || m.Cores < runtime.NumCPU() || m.MemBytes < 64<<20 {
		t.Errorf("ReadMachine = %+v, %v; want at least %d CPUs and 64 MiB", m, err, runtime.NumCPU())
	}
	if _, err := ReadLoadAvg(); err != nil {
		t.Error(err)
	}
	if _, err := ReadCPUStat(); err != nil {
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
