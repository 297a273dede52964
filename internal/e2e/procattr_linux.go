package e2e

import "syscall"

// procAttr starts the collector in its own process group (a ^C aimed at
// `go test` or `make demo` reaches it only through Stop) and has the kernel
// kill it if the process that started it dies first (a test binary killed by
// -timeout runs no cleanup), so no collector outlives its test holding ports.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
