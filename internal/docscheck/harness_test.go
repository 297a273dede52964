package docscheck

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
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
	r, err := testkit.RepoRoot()
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
// the last one wins) plus, last, the YAML documents overrides (each written
// to a file of its own), with env added to its environment. It waits until
// the collector is ready and stops it by PID when the test ends, logging
// its output if the test failed. Its listeners bind port 0 on the e2e
// Listen addresses (see e2e.Config), which the overrides use.
func startCollector(t *testing.T, env, configs []string, overrides ...string) *collector {
	t.Helper()
	return startCollectorFlags(t, nil, env, configs, overrides...)
}

// startCollectorFlags is startCollector with further command-line flags.
func startCollectorFlags(t *testing.T, flags, env, configs []string, overrides ...string) *collector {
	t.Helper()
	dir := t.TempDir()
	args := slices.Clone(configs)
	for i, doc := range overrides {
		args = append(args, filepath.Join(dir, fmt.Sprintf("override%d.yaml", i)))
		if err := os.WriteFile(args[len(args)-1], []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c := &collector{t: t, log: filepath.Join(dir, "collector.log")}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	col, err := e2e.StartFlags(ctx, binary(t), c.log, env, flags, args...)
	if err != nil {
		c.dumpLog()
		t.Fatal(err)
	}
	c.col, c.ports = col, col.Ports
	t.Cleanup(func() {
		if err := col.Stop(stopGrace); err != nil {
			t.Errorf("stop: %v", err)
		}
		if t.Failed() {
			c.dumpLog()
		}
	})
	return c
}

// configYAML renders an e2e.Config (JSON is YAML).
func configYAML(t *testing.T, cfg map[string]any) string {
	t.Helper()
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
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
	c.t.Logf("collector output, last lines:\n%s", strings.Join(lines, "\n"))
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

func (c *collector) grpcSender() *otlp.Client {
	c.t.Helper()
	s, err := otlp.NewClient(otlp.GRPC, c.ports.OTLPGRPC)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { _ = s.Close() })
	return s
}

// testSink is an OTLP sink whose requests Faults (internal/otlp) decide.
type testSink struct {
	*otlp.Sink
	*otlp.Faults
}

// newSink starts an OTLP sink, closed when the test ends.
func newSink(t testing.TB) *testSink {
	t.Helper()
	s, err := otlp.NewSink()
	if err != nil {
		t.Fatalf("sink: %v", err)
	}
	f := &otlp.Faults{}
	s.Gate = f.Gate
	t.Cleanup(func() { _ = s.Close() })
	t.Cleanup(f.Unhold) // first: held requests go before the servers stop
	return &testSink{s, f}
}

// listenYAML is the extensions and receivers sections that put a
// collector's health_check and OTLP receivers (gRPC and HTTP) on the e2e
// Listen addresses, whose ports the harness reads back.
func listenYAML() string {
	return fmt.Sprintf(`
extensions:
  health_check: {endpoint: %q}
receivers:
  otlp:
    protocols:
      grpc: {endpoint: %q}
      http: {endpoint: %q}
`, e2e.ListenHealth, e2e.ListenOTLPGRPC, e2e.ListenOTLPHTTP)
}

// telemetryYAML is a service.telemetry block: internal metrics as
// Prometheus text on the e2e metrics address, names exactly as written.
func telemetryYAML() string {
	return fmt.Sprintf(`
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: %s
                port: 0
                without_units: true
                without_type_suffix: true
                without_scope_info: true
`, e2e.MetricsHost)
}
