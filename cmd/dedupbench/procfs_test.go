package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/procfs"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// sampleProc writes a proc file system of sample files: process 4242 (a
// command name with a space and a ')' in it), a process without VmHWM, two
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
		"4343/stat":   "4343 (idle) S 1 4343 4343 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 1 1 1 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0\n",
		"4343/status": "Name:\tidle\nThreads:\t1\n",
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
	root := sampleProc(t)
	if cpu, peak, err := usage(root, 4242); err != nil || cpu != 18.01 || peak != 81236*1024 {
		t.Errorf("usage(4242) = %v s, %d bytes, %v; want 18.01 s, %d bytes", cpu, peak, err, 81236*1024)
	}
	if _, _, err := usage(root, 4343); err == nil {
		t.Error("usage of a status without VmHWM: no error")
	}
	if _, _, err := usage(root, 99999); err == nil {
		t.Error("usage of a missing process: no error")
	}
	if m := machine(root); m != "AMD EPYC 7B13, 2 cores, 23.5 GiB" {
		t.Errorf("machine = %q", m)
	}
}

// TestThisHost reads the machine's own /proc: this process's CPU time
// grows while it computes, and its peak resident set covers memory it
// touched.
func TestThisHost(t *testing.T) {
	pid := os.Getpid()
	before, _, err := usage(procfs.DefaultMountPoint, pid)
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
		after, _, err := usage(procfs.DefaultMountPoint, pid)
		return err == nil && after > before
	}, func() string { return fmt.Sprint(x) })
	mem := make([]byte, 64<<20)
	for i := range mem {
		if i%4096 == 0 {
			mem[i] = 1
		}
	}
	_, peak, err := usage(procfs.DefaultMountPoint, pid)
	runtime.KeepAlive(mem)
	if err != nil || peak < 64<<20 {
		t.Errorf("peak RSS %d, %v after touching 64 MiB", peak, err)
	}
}

func TestWaitForQuiet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loadavg")
	write := func(s string) {
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	// Quiet at once.
	write("0.42 1.50 3.75 2/181 9876\n")
	if got := waitForQuiet(ctx, path, time.Hour, time.Millisecond, t.Fatalf); got != "0.42 1.50 3.75" {
		t.Fatalf("quiet: %q", got)
	}
	// Busy, then quiet by the second reading: one wait logged.
	write("2.50 1.50 1.00 2/181 9876\n")
	var logs []string
	got := waitForQuiet(ctx, path, time.Hour, time.Millisecond, func(format string, args ...any) {
		logs = append(logs, fmt.Sprintf(format, args...))
		write("0.70 1.40 1.00 2/181 9876\n")
	})
	if got != "0.70 1.40 1.00" || len(logs) != 1 || logs[0] != "load 2.50 1.50 1.00 (1-min >= 1): waiting (0s of at most 1h0m0s)" {
		t.Fatalf("busy then quiet: %q after %q", got, logs)
	}
	// Never quiet: gives up after the bound with the last reading.
	write("3.00 3.00 3.00 2/181 9876\n")
	logs = nil
	got = waitForQuiet(ctx, path, 3*time.Millisecond, time.Millisecond, func(format string, args ...any) {
		logs = append(logs, fmt.Sprintf(format, args...))
	})
	if got != "3.00 3.00 3.00 (never below 1: figures of a busy machine)" || len(logs) != 3 {
		t.Fatalf("never quiet: %q after %d waits, want 3", got, len(logs))
	}
}
