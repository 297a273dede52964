//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device: a terminal, most
// likely (x/sys would tell a TTY from /dev/null; this build does without).
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
