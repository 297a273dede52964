package e2e

// The binaries the end-to-end and docs tests run: built once per test
// process by the Makefile's ocb targets, unless the environment names them.

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// build is one binary the Makefile builds with ocb.
type build struct {
	env    string // names a binary already built, used instead
	target string // make target
	bin    string // what the target leaves, relative to the repository root

	once sync.Once
	path string
	err  error
}

var (
	dedupBuild = &build{env: "OTELCOL_DEDUP_BIN", target: "build", bin: "bin/otelcol-dedup"}
	agentBuild = &build{env: "OTELCOL_AGENT_BIN", target: "agent", bin: "bin/otelcol-agent"}
)

// Distribution returns the path of the otelcol-dedup binary: $OTELCOL_DEDUP_BIN
// when set (`make test` sets it), otherwise the one `make build` leaves in
// bin/, which it builds with ocb if any of its sources changed. It runs make
// at most once per process, and an exclusive lock on _build/.lock keeps two
// test processes from building at once. Progress goes to log.
func Distribution(log io.Writer) (string, error) { return dedupBuild.get(log) }

// AgentDistribution returns the path of otelcol-agent, a collector of
// upstream modules only that tests run in front of otelcol-dedup:
// $OTELCOL_AGENT_BIN when set, otherwise built like Distribution by
// `make agent`.
func AgentDistribution(log io.Writer) (string, error) { return agentBuild.get(log) }

func (b *build) get(log io.Writer) (string, error) {
	b.once.Do(func() { b.path, b.err = b.make(log) })
	return b.path, b.err
}

func (b *build) make(log io.Writer) (string, error) {
	if p := os.Getenv(b.env); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("e2e: %s=%q: %w", b.env, p, err)
		}
		return filepath.Abs(p)
	}
	root, err := testkit.RepoRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(root, "_build"), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(root, "_build", ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close() // and unlocked
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("e2e: lock _build/.lock: %w", err)
	}
	fmt.Fprintf(log, "e2e: make %s (ocb; a cold build takes minutes, an unchanged one seconds)\n", b.target)
	start := time.Now()
	cmd := exec.Command("make", "--no-print-directory", b.target)
	cmd.Dir = root
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("e2e: make %s in %s: %w\n%s", b.target, root, err, lastLines(out.Bytes(), 60))
	}
	fmt.Fprintf(log, "e2e: make %s done in %s\n", b.target, time.Since(start).Round(100*time.Millisecond))
	return filepath.Join(root, b.bin), nil
}

// lastLines returns the last n lines of b.
func lastLines(b []byte, n int) []byte {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	return bytes.Join(lines[max(len(lines)-n, 0):], []byte("\n"))
}
