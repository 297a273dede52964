//go:build !linux

package e2e

import "syscall"

// procAttr starts the collector in its own process group, so a ^C aimed at
// `go test` or `make demo` reaches it only through Stop.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
