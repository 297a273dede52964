package main

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/prometheus/procfs"
)

// host reads what a run records about the machine and its processes from a
// proc file system, parsed by github.com/prometheus/procfs: the load, a
// process's CPU time and resident set, the CPUs and the memory. Tests point
// it at a directory of sample files.
type host struct{ fs procfs.FS }

func newHost(mountPoint string) (host, error) {
	fs, err := procfs.NewFS(mountPoint)
	return host{fs: fs}, err
}

// thisHost reads the machine's own /proc.
var thisHost = sync.OnceValues(func() (host, error) { return newHost(procfs.DefaultMountPoint) })

// procCPU is the user + system CPU time a process used so far, all its
// threads (not its children).
func (h host) procCPU(pid int) (time.Duration, error) {
	p, err := h.fs.Proc(pid)
	if err != nil {
		return 0, err
	}
	st, err := p.Stat()
	if err != nil {
		return 0, err
	}
	return time.Duration(math.Round(st.CPUTime() * float64(time.Second))), nil
}

// rss is a process's peak resident set (VmHWM) and its current one (VmRSS),
// in bytes.
func (h host) rss(pid int) (peak, now int64, err error) {
	p, err := h.fs.Proc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, err
	}
	if st.VmHWM == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
	}
	return int64(st.VmHWM), int64(st.VmRSS), nil
}

// LoadAvg is the 1-, 5- and 15-minute load averages.
type LoadAvg struct{ One, Five, Fifteen float64 }

func (l LoadAvg) String() string { return fmt.Sprintf("%.2f %.2f %.2f", l.One, l.Five, l.Fifteen) }

func (h host) loadAvg() (LoadAvg, error) {
	l, err := h.fs.LoadAvg()
	if err != nil {
		return LoadAvg{}, err
	}
	return LoadAvg{One: l.Load1, Five: l.Load5, Fifteen: l.Load15}, nil
}

// machine describes the host for the report: "<CPU model>, <n> cores,
// <memory> GiB".
func (h host) machine() (string, error) {
	cpus, err := h.fs.CPUInfo()
	if err != nil {
		return "", err
	}
	mem, err := h.fs.Meminfo()
	if err != nil {
		return "", err
	}
	if len(cpus) == 0 || mem.MemTotalBytes == nil {
		return "", errors.New("cpuinfo or meminfo: no processor or no MemTotal")
	}
	return fmt.Sprintf("%s, %d cores, %.1f GiB", cpus[0].ModelName, len(cpus), float64(*mem.MemTotalBytes)/(1<<30)), nil
}

// waitForQuiet polls the load every poll until the 1-minute average is
// below max or wait has passed, and returns the last reading and whether it
// was below max. A machine that stays busy delays the run by wait at most,
// and the caller records the load it ran under.
func waitForQuiet(max float64, wait, poll time.Duration, read func() (LoadAvg, error), sleep func(time.Duration), log func(LoadAvg, time.Duration)) (LoadAvg, bool, error) {
	for waited := time.Duration(0); ; waited += poll {
		l, err := read()
		if err != nil || l.One < max {
			return l, err == nil, err
		}
		if waited >= wait {
			return l, false, nil
		}
		log(l, waited)
		sleep(poll)
	}
}
