package docscheck

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	startTimeout = 30 * time.Second
	stopGrace    = 15 * time.Second
	opTimeout    = 30 * time.Second
	cmdTimeout   = 2 * time.Minute
)

// root is the repository root.
func root(t *testing.T) string {
	t.Helper()
	r, err := e2e.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// binary is the otelcol-dedup binary under test: $OTELCOL_DEDUP_BIN, or the
// one the e2e harness builds with ocb (once per test process).
func binary(t *testing.T) string {
	t.Helper()
	bin, err := e2e.Distribution(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// readFile reads a file relative to the repository root.
func readFile(t *testing.T, rel string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root(t), rel))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs a command to completion within cmdTimeout and returns its combined
// output and error. env entries are added to the environment.
func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	return runTimeout(t, cmdTimeout, dir, env, name, args...)
}

// runTimeout is run with another bound.
func runTimeout(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	return runIn(t, timeout, dir, append(os.Environ(), env...), name, args...)
}

// runIn runs a command with exactly the environment environ (none at all
// when it is empty).
func runIn(t *testing.T, timeout time.Duration, dir string, environ []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{}, environ...) // never nil: nil would pass ours on
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if ctx.Err() != nil {
		return out.String(), fmt.Errorf("%s %s: timed out after %s", name, strings.Join(args, " "), timeout)
	}
	return out.String(), err
}

// validate runs `otelcol-dedup validate` on the config files (merged in
// order) with an empty environment, as on a machine where nothing is set,
// and returns its output and error.
func validate(t *testing.T, configs ...string) (string, error) {
	t.Helper()
	return validateIn(t, nil, configs...)
}

// validateIn is validate with exactly the environment environ.
func validateIn(t *testing.T, environ []string, configs ...string) (string, error) {
	t.Helper()
	args := []string{"validate"}
	for _, c := range configs {
		args = append(args, "--config", c)
	}
	return runIn(t, cmdTimeout, root(t), environ, binary(t), args...)
}

// collector is one otelcol-dedup process a test started.
type collector struct {
	t     *testing.T
	col   *e2e.Collector
	ports e2e.Ports
	log   string
}

// startCollector starts the binary with the config files (merged in order;
// the last one wins) plus, last, the YAML documents that override(ports)
// returns (each written to a file of its own), with
// env added to its environment, on fresh loopback ports. It waits until
// health_check answers and stops the process by PID when the test ends,
// logging its output if the test failed. A start that lost a port race is
// retried on other ports.
func startCollector(t *testing.T, env []string, override func(e2e.Ports) []string, configs ...string) *collector {
	t.Helper()
	bin := binary(t)
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		ports, err := e2e.FreePorts()
		if err != nil {
			t.Fatal(err)
		}
		args := append([]string{}, configs...)
		for i, doc := range override(ports) {
			p := filepath.Join(dir, fmt.Sprintf("override%d-%d.yaml", attempt, i))
			if err := e2e.WriteFile(p, []byte(doc)); err != nil {
				t.Fatal(err)
			}
			args = append(args, p)
		}
		logPath := filepath.Join(dir, fmt.Sprintf("collector%d.log", attempt))
		logFile, err := e2e.LogFile(logPath)
		if err != nil {
			t.Fatal(err)
		}
		col, err := startWithEnv(bin, logFile, env, args...)
		if err != nil {
			logFile.Close()
			t.Fatal(err)
		}
		c := &collector{t: t, col: col, ports: ports, log: logPath}
		lost := false
		t.Cleanup(func() {
			err := col.Stop(stopGrace)
			logFile.Close()
			if err != nil && !lost {
				t.Errorf("stop: %v", err)
			}
			if t.Failed() && !lost {
				c.dumpLog()
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		err = col.WaitHealthy(ctx, ports.HealthURL())
		cancel()
		if err == nil {
			return c
		}
		if attempt < 3 && c.logContains("address already in use") {
			lost = true
			_ = col.Stop(stopGrace)
			continue
		}
		t.Fatal(err)
	}
}

// envMu serializes startWithEnv's changes to the process environment.
var envMu sync.Mutex

// startWithEnv is e2e.StartCollector with extra environment variables: the
// harness passes its own environment on, so they are set around the start.
func startWithEnv(bin string, log *os.File, env []string, configs ...string) (*e2e.Collector, error) {
	envMu.Lock()
	defer envMu.Unlock()
	var restore []func()
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		old, had := os.LookupEnv(k)
		os.Setenv(k, v)
		restore = append(restore, func() {
			if had {
				os.Setenv(k, old)
			} else {
				os.Unsetenv(k)
			}
		})
	}
	defer func() {
		for _, r := range restore {
			r()
		}
	}()
	return e2e.StartCollector(bin, log, configs...)
}

func (c *collector) logContains(s string) bool {
	b, err := os.ReadFile(c.log)
	return err == nil && strings.Contains(string(b), s)
}

func (c *collector) dumpLog() {
	b, err := os.ReadFile(c.log)
	if err != nil {
		c.t.Logf("collector log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	c.t.Logf("collector (pid %d) output, last lines:\n%s", c.col.PID, strings.Join(lines, "\n"))
}

// stop stops the collector now (SIGTERM; it drains its pipelines).
func (c *collector) stop() {
	c.t.Helper()
	if err := c.col.Stop(stopGrace); err != nil {
		c.t.Fatalf("stop: %v", err)
	}
}

func (c *collector) scrape() e2e.Scrape {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	sc, err := e2e.ScrapeMetrics(ctx, c.ports.MetricsURL())
	if err != nil {
		c.t.Fatal(err)
	}
	return sc
}

func (c *collector) grpcSender() *e2e.GRPCSender {
	c.t.Helper()
	s, err := e2e.NewGRPCSender(e2e.Addr(c.ports.OTLPGRPC))
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = s.Close() })
	return s
}

// newSink starts an OTLP sink, closed when the test ends.
func newSink(t *testing.T) *e2e.Sink {
	t.Helper()
	s, err := e2e.NewSink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// listenYAML is the extensions and receivers sections that put a
// collector's health_check and OTLP receivers (gRPC and HTTP) on ports p.
func listenYAML(p e2e.Ports) string {
	return fmt.Sprintf(`
extensions:
  health_check: {endpoint: %q}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
      http: {endpoint: %q}
`, e2e.Addr(p.Health), e2e.Addr(p.OTLPGRPC), e2e.Addr(p.OTLPHTTP))
}

// telemetryYAML is a service.telemetry block: internal metrics as
// Prometheus text on 127.0.0.1:port, names exactly as written.
func telemetryYAML(port int) string {
	return fmt.Sprintf(`
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
                without_units: true
                without_type_suffix: true
                without_scope_info: true
`, port)
}
