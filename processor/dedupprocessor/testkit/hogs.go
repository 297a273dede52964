package testkit

import (
	"os/exec"
	"syscall"
	"testing"
)

// Hogs starts n processes that each keep a CPU busy (a shell's empty
// loop), as other workloads on a crowded node or a container at its CPU
// limit do, and kills them by PID when the test ends, or when the test
// binary dies (Linux's parent-death signal). It returns their PIDs.
func Hogs(tb testing.TB, n int) []int {
	tb.Helper()
	pids := make([]int, 0, n)
	for range n {
		cmd := exec.Command("sh", "-c", "while :; do :; done")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			tb.Fatalf("testkit: start a CPU hog: %v", err)
		}
		pids = append(pids, cmd.Process.Pid)
		tb.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		})
	}
	return pids
}
