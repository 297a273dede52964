// Package e2e runs the otelcol-dedup distribution the way users do: it builds
// the binary with ocb, starts it with its listeners on port 0 of loopback
// addresses and reads back the ports they got, sends OTLP over the network,
// receives what it exports in a sink (package otlp), and reads its
// Prometheus metrics endpoint.
//
// The harness (this package's non-test files) is shared by the end-to-end
// tests beside it, internal/docscheck's tests, dedupload's demo and the
// benchmark driver. Every process it starts is stopped by PID.
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

// EnvAgentBinary names an already built otelcol-agent binary, used instead of
// building it; `make test` sets it after `make agent`.
const EnvAgentBinary = "OTELCOL_AGENT_BIN"

// AgentBinaryName is the name ocb gives the agent (dist.name in
// testdata/agent/builder-config.yaml).
const AgentBinaryName = "otelcol-agent"

// ocbBuild is one collector the harness builds with ocb.
type ocbBuild struct {
	what     string // for messages
	env      string // names a prebuilt binary
	manifest string // relative to the repository root
	outDir   string // dist.output_path, relative to the repository root
	binary   string // dist.name

	once sync.Once
	path string
	err  error
}

var (
	dedupBuild = &ocbBuild{what: "the otelcol-dedup distribution", env: EnvBinary,
		manifest: "builder-config.yaml", outDir: "_build", binary: BinaryName}
	agentBuild = &ocbBuild{what: "the otelcol-agent (upstream modules only)", env: EnvAgentBinary,
		manifest: filepath.Join("testdata", "agent", "builder-config.yaml"), outDir: filepath.Join("_build", "agent"), binary: AgentBinaryName}
)

// Distribution returns the path of the otelcol-dedup binary: $OTELCOL_DEDUP_BIN
// when set, otherwise the binary it builds with ocb (`go tool builder --config
// builder-config.yaml` in the repository root, output in _build/). The build
// runs at most once per process, and an exclusive lock on _build/.lock keeps two
// test processes from building into the same directory at once. Progress and
// the build time are written to log.
func Distribution(log io.Writer) (string, error) {
	return dedupBuild.get(log)
}

// AgentDistribution returns the path of otelcol-agent, a collector of
// upstream modules only (OTLP receiver, OTLP/gRPC and OTLP/HTTP exporters)
// that tests run as the agent in front of otelcol-dedup:
// $OTELCOL_AGENT_BIN when set, otherwise built like Distribution from
// testdata/agent/builder-config.yaml into _build/agent/.
func AgentDistribution(log io.Writer) (string, error) {
	return agentBuild.get(log)
}

func (b *ocbBuild) get(log io.Writer) (string, error) {
	b.once.Do(func() { b.path, b.err = b.build(log) })
	return b.path, b.err
}

func (b *ocbBuild) build(log io.Writer) (string, error) {
	if p := os.Getenv(b.env); p != "" {
		abs, err := filepath.Abs(p)
		if err != nil {
			return "", err
		}
		if _, err := os.Stat(abs); err != nil {
			return "", fmt.Errorf("e2e: %s=%q: %w", b.env, p, err)
		}
		fmt.Fprintf(log, "e2e: using %s from %s\n", abs, b.env)
		return abs, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	buildDir := filepath.Join(root, "_build")
	if err := os.MkdirAll(buildDir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(buildDir, ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()

	fmt.Fprintf(log, "e2e: building %s with ocb (go tool builder --config %s); a cold build takes about 3 minutes\n", b.what, b.manifest)
	start := time.Now()
	// ocb makes an (unused) temp dir on every run: keep it out of /tmp.
	tmp, err := os.MkdirTemp(buildDir, "tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	cmd := exec.Command("go", "tool", "builder", "--config", b.manifest)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("e2e: building %s failed (go tool builder --config %s in %s): %w\n%s",
			b.what, b.manifest, root, err, tail(out.Bytes(), 60))
	}
	bin := filepath.Join(root, b.outDir, b.binary)
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
