// Package bench is the engine of cmd/dedupbench, the driver behind
// `make bench`: it runs the Go benchmarks and summarizes them, measures the
// processor in-process (the throughput sweep behind the chart, the shared
// tier against redis-benchmark), runs the otelcol-dedup binary under load and
// reads its CPU time from /proc, and formats the targets table and the chart.
//
// Nothing here asserts on time: it measures and reports. The parsing and
// formatting parts are pure functions with tests of their own.
package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ClockTicks is USER_HZ, the unit of the CPU times in /proc/<pid>/stat. The
// kernel reports them in USER_HZ whatever its own HZ, and USER_HZ is 100 on
// every Linux ABI Go supports; ClockTicksPerSecond asks getconf anyway.
const ClockTicks = 100

// ClockTicksPerSecond returns `getconf CLK_TCK`, or ClockTicks if getconf is
// missing or answers nonsense.
func ClockTicksPerSecond() int64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return ClockTicks
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
	if err != nil || n <= 0 {
		return ClockTicks
	}
	return n
}

// ProcCPU is the CPU time a process used, from /proc/<pid>/stat, in clock
// ticks (all its threads; not its children).
type ProcCPU struct {
	UTime, STime int64
}

// Ticks is user + system time.
func (c ProcCPU) Ticks() int64 { return c.UTime + c.STime }

// Seconds converts Ticks with the given ticks per second.
func (c ProcCPU) Seconds(ticksPerSecond int64) float64 {
	return float64(c.Ticks()) / float64(ticksPerSecond)
}

// Sub returns c - before.
func (c ProcCPU) Sub(before ProcCPU) ProcCPU {
	return ProcCPU{UTime: c.UTime - before.UTime, STime: c.STime - before.STime}
}

// ParseProcStat parses the contents of /proc/<pid>/stat. The second field,
// the command name in parentheses, may itself hold spaces and parentheses,
// so the fields are counted from the last ')': utime and stime are fields 14
// and 15 of the whole line (proc(5)), the 12th and 13th after it.
func ParseProcStat(s string) (ProcCPU, error) {
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return ProcCPU{}, errors.New("proc stat: no ')' after the command name")
	}
	fields := strings.Fields(s[end+1:])
	// fields[0] is field 3 (state); utime is field 14, so fields[11].
	if len(fields) < 13 {
		return ProcCPU{}, fmt.Errorf("proc stat: %d fields after the command name, want >= 13", len(fields))
	}
	u, err := strconv.ParseInt(fields[11], 10, 64)
	if err != nil {
		return ProcCPU{}, fmt.Errorf("proc stat: utime %q: %w", fields[11], err)
	}
	st, err := strconv.ParseInt(fields[12], 10, 64)
	if err != nil {
		return ProcCPU{}, fmt.Errorf("proc stat: stime %q: %w", fields[12], err)
	}
	return ProcCPU{UTime: u, STime: st}, nil
}

// ReadProcCPU reads /proc/<pid>/stat.
func ReadProcCPU(pid int) (ProcCPU, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcCPU{}, err
	}
	return ParseProcStat(string(b))
}

// ParseStatusKB returns the value of a "Name:   1234 kB" line of
// /proc/<pid>/status (or /proc/meminfo), in bytes.
func ParseStatusKB(r io.Reader, name string) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		f := strings.Fields(v)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s: want \"<n> kB\", got %q", name, strings.TrimSpace(v))
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		return n * 1024, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s: no such line", name)
}

// ReadPeakRSS returns VmHWM, the process's peak resident set, in bytes.
func ReadPeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return ParseStatusKB(bytes.NewReader(b), "VmHWM")
}

// LoadAvg is /proc/loadavg's three averages.
type LoadAvg struct{ One, Five, Fifteen float64 }

func (l LoadAvg) String() string {
	return fmt.Sprintf("%.2f %.2f %.2f", l.One, l.Five, l.Fifteen)
}

// ParseLoadAvg parses /proc/loadavg ("0.42 0.51 0.60 1/123 4567").
func ParseLoadAvg(s string) (LoadAvg, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return LoadAvg{}, fmt.Errorf("loadavg: want 3 averages, got %q", s)
	}
	var v [3]float64
	for i := range v {
		x, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return LoadAvg{}, fmt.Errorf("loadavg: %w", err)
		}
		v[i] = x
	}
	return LoadAvg{One: v[0], Five: v[1], Fifteen: v[2]}, nil
}

// ReadLoadAvg reads /proc/loadavg.
func ReadLoadAvg() (LoadAvg, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return LoadAvg{}, err
	}
	return ParseLoadAvg(string(b))
}

// WaitForQuiet polls the load every poll until the 1-minute average is below
// max or wait has passed, and returns the last reading and whether it was
// below max. The wait is bounded: a machine that stays busy delays the run by
// wait at most, and the caller records the load it ran under.
func WaitForQuiet(max float64, wait, poll time.Duration, read func() (LoadAvg, error), sleep func(time.Duration), log func(LoadAvg, time.Duration)) (LoadAvg, bool, error) {
	var waited time.Duration
	for {
		l, err := read()
		if err != nil {
			return LoadAvg{}, false, err
		}
		if l.One < max {
			return l, true, nil
		}
		if waited >= wait {
			return l, false, nil
		}
		if log != nil {
			log(l, waited)
		}
		sleep(poll)
		waited += poll
	}
}

// Machine describes the host for the report.
type Machine struct {
	CPUModel string
	Cores    int
	MemBytes int64
}

// ParseCPUInfo returns the first "model name" of /proc/cpuinfo and the number
// of "processor" entries.
func ParseCPUInfo(r io.Reader) (model string, cpus int, err error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "processor":
			cpus++
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		}
	}
	return model, cpus, sc.Err()
}

// ReadMachine reads /proc/cpuinfo and /proc/meminfo.
func ReadMachine() (Machine, error) {
	var m Machine
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return m, err
	}
	if m.CPUModel, m.Cores, err = ParseCPUInfo(bytes.NewReader(b)); err != nil {
		return m, err
	}
	b, err = os.ReadFile("/proc/meminfo")
	if err != nil {
		return m, err
	}
	m.MemBytes, err = ParseStatusKB(bytes.NewReader(b), "MemTotal")
	return m, err
}

// CPUStat is the aggregate "cpu" line of /proc/stat, in clock ticks.
type CPUStat struct {
	Total, Idle int64 // Idle includes iowait
}

// ParseCPUStat parses the first line of /proc/stat
// ("cpu  user nice system idle iowait irq softirq steal guest guest_nice").
// Guest time is already counted in user and nice, so it is left out.
func ParseCPUStat(s string) (CPUStat, error) {
	line, _, _ := strings.Cut(s, "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return CPUStat{}, fmt.Errorf("proc stat: want an aggregate cpu line, got %q", line)
	}
	var st CPUStat
	for i, v := range f[1:min(len(f), 9)] { // user .. steal
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return CPUStat{}, fmt.Errorf("proc stat: field %d %q: %w", i+1, v, err)
		}
		st.Total += n
		if i == 3 || i == 4 { // idle, iowait
			st.Idle += n
		}
	}
	return st, nil
}

// ReadCPUStat reads /proc/stat.
func ReadCPUStat() (CPUStat, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return CPUStat{}, err
	}
	return ParseCPUStat(string(b))
}

// Busy is the fraction of CPU time, over all CPUs, that was not idle
// between before and s.
func (s CPUStat) Busy(before CPUStat) float64 {
	total := s.Total - before.Total
	if total <= 0 {
		return 0
	}
	return 1 - float64(s.Idle-before.Idle)/float64(total)
}

// SampleBusy measures the machine's CPU busy fraction over d.
func SampleBusy(d time.Duration) (float64, error) {
	a, err := ReadCPUStat()
	if err != nil {
		return 0, err
	}
	time.Sleep(d)
	b, err := ReadCPUStat()
	if err != nil {
		return 0, err
	}
	return b.Busy(a), nil
}
