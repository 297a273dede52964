package main

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/procfs"
)

// Host reads what a run records about the machine and its processes from a
// proc file system (github.com/prometheus/procfs parses it): the load, the
// CPUs' busy time, a process's CPU time and peak resident set.
type Host struct{ fs procfs.FS }

// NewHost reads the proc file system mounted at mountPoint (tests point it
// at a directory of sample files).
func NewHost(mountPoint string) (Host, error) {
	fs, err := procfs.NewFS(mountPoint)
	if err != nil {
		return Host{}, err
	}
	return Host{fs: fs}, nil
}

// ThisHost is the machine's own /proc.
func ThisHost() (Host, error) { return NewHost(procfs.DefaultMountPoint) }

// ProcCPU is the user + system CPU time a process used so far, all its
// threads (not its children).
func (h Host) ProcCPU(pid int) (time.Duration, error) {
	p, err := h.fs.Proc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return seconds(st.CPUTime()), nil
}

// PeakRSS is a process's peak resident set (VmHWM), in bytes.
func (h Host) PeakRSS(pid int) (int64, error) {
	p, err := h.fs.Proc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, err
	}
	if st.VmHWM == 0 {
		return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return int64(st.VmHWM), nil
}

// LoadAvg is the 1-, 5- and 15-minute load averages.
type LoadAvg struct{ One, Five, Fifteen float64 }

func (l LoadAvg) String() string {
	return fmt.Sprintf("%.2f %.2f %.2f", l.One, l.Five, l.Fifteen)
}

// LoadAvg reads the load averages.
func (h Host) LoadAvg() (LoadAvg, error) {
	l, err := h.fs.LoadAvg()
	if err != nil {
		return LoadAvg{}, err
	}
	return LoadAvg{One: l.Load1, Five: l.Load5, Fifteen: l.Load15}, nil
}

// CPUStat is the time all CPUs together spent since boot, in seconds.
type CPUStat struct {
	Total, Idle float64 // Idle includes iowait
}

// CPUStat reads the aggregate CPU times. Guest time is already counted in
// user and nice, so it is left out of Total.
func (h Host) CPUStat() (CPUStat, error) {
	st, err := h.fs.Stat()
	if err != nil {
		return CPUStat{}, err
	}
	c := st.CPUTotal
	return CPUStat{
		Total: c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal,
		Idle:  c.Idle + c.Iowait,
	}, nil
}

// Busy is the fraction of CPU time, over all CPUs, that was not idle
// between before and s, within [0, 1]: the kernel's iowait counter can step
// back, which on an idle machine would read as a little less than none.
func (s CPUStat) Busy(before CPUStat) float64 {
	total := s.Total - before.Total
	if total <= 0 {
		return 0
	}
	return min(max(1-(s.Idle-before.Idle)/total, 0), 1)
}

// Machine describes the host for the report.
type Machine struct {
	CPUModel string
	Cores    int
	MemBytes int64
}

// Machine reads the CPU model, the number of CPUs and the memory.
func (h Host) Machine() (Machine, error) {
	cpus, err := h.fs.CPUInfo()
	if err != nil {
		return Machine{}, err
	}
	if len(cpus) == 0 {
		return Machine{}, errors.New("cpuinfo: no processor")
	}
	mem, err := h.fs.Meminfo()
	if err != nil {
		return Machine{}, err
	}
	if mem.MemTotalBytes == nil {
		return Machine{}, errors.New("meminfo: no MemTotal")
	}
	return Machine{CPUModel: cpus[0].ModelName, Cores: len(cpus), MemBytes: int64(*mem.MemTotalBytes)}, nil
}

// The machine's own figures, for the driver.

// ReadProcCPU is ProcCPU of this machine.
func ReadProcCPU(pid int) (time.Duration, error) {
	h, err := ThisHost()
	if err != nil {
		return 0, err
	}
	return h.ProcCPU(pid)
}

// ReadPeakRSS is PeakRSS of this machine.
func ReadPeakRSS(pid int) (int64, error) {
	h, err := ThisHost()
	if err != nil {
		return 0, err
	}
	return h.PeakRSS(pid)
}

// ReadLoadAvg is LoadAvg of this machine.
func ReadLoadAvg() (LoadAvg, error) {
	h, err := ThisHost()
	if err != nil {
		return LoadAvg{}, err
	}
	return h.LoadAvg()
}

// ReadCPUStat is CPUStat of this machine.
func ReadCPUStat() (CPUStat, error) {
	h, err := ThisHost()
	if err != nil {
		return CPUStat{}, err
	}
	return h.CPUStat()
}

// ReadMachine is Machine of this machine.
func ReadMachine() (Machine, error) {
	h, err := ThisHost()
	if err != nil {
		return Machine{}, err
	}
	return h.Machine()
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

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }
