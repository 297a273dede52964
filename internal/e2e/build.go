// Package e2e runs the otelcol-dedup distribution the way users do: it builds
// the binary with ocb, starts it on free loopback ports, sends OTLP over the
// network, receives what it exports in a sink it runs itself, and reads its
// Prometheus metrics endpoint.
//
// The harness (this package's non-test files) is shared by the end-to-end
// tests beside it and by cmd/dedupdemo. Every process it starts is stopped by
// PID and every socket it opens is on 127.0.0.1.
package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// EnvBinary names an already built otelcol-dedup binary. When it is set the
// harness uses that binary instead of building the distribution; `make test`
// sets it after `make build`.
const EnvBinary = "OTELCOL_DEDUP_BIN"

// BinaryName is the name ocb gives the binary (dist.name in builder-config.yaml).
const BinaryName = "otelcol-dedup"

var built struct {
	once sync.Once
	path string
	err  error
}

// Distribution returns the path of the otelcol-dedup binary: $OTELCOL_DEDUP_BIN
// when set, otherwise the binary it builds with ocb (`go tool builder --config
// builder-config.yaml` in the repository root, output in _build/). The build
// runs at most once per process, and an exclusive lock on _build/.lock keeps two
// test processes from building into the same directory at once. Progress and
// the build time are written to log.
func Distribution(log io.Writer) (string, error) {
	built.once.Do(func() { built.path, built.err = distribution(log) })
	return built.path, built.err
}

func distribution(log io.Writer) (string, error) {
	if p := os.Getenv(EnvBinary); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("e2e: %s=%q: %w", EnvBinary, p, err)
		}
		fmt.Fprintf(log, "e2e: using %s from %s\n", abs, EnvBinary)
		return abs, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	outDir := filepath.Join(root, "_build")
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(outDir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	fmt.Fprintf(log, "e2e: building the distribution with ocb (go tool builder --config builder-config.yaml); a cold build takes about 3 minutes\n")
	start := time.Now()
	// ocb makes an (unused) temp dir on every run: keep it out of /tmp.
	tmp, err := os.MkdirTemp(outDir, "tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "tool", "builder", "--config", "builder-config.yaml")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("e2e: building the otelcol-dedup distribution failed (go tool builder --config builder-config.yaml in %s): %w\n%s",
			root, err, tail(out.Bytes(), 60))
	}
	bin := filepath.Join(outDir, BinaryName)
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("e2e: ocb reported success but %s is missing: %w", bin, err)
	}
	fmt.Fprintf(log, "e2e: built %s in %s\n", bin, time.Since(start).Round(100*time.Millisecond))
	return bin, nil
}

// RepoRoot returns the repository root: the nearest directory at or above the
// working directory that holds builder-config.yaml.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "builder-config.yaml")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("e2e: builder-config.yaml not found in the working directory or any parent")
		}
		dir = parent
	}
}

// lockFile takes an exclusive flock on path, blocking until it is free.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("e2e: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) []byte {
	b = bytes.TrimRight(b, "\n")
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
