// Package e2e runs the otelcol-dedup distribution the way users do: it
// starts the binary (testkit builds it for the tests) with its listeners on
// port 0 of loopback addresses and reads back the ports they got, and reads
// its Prometheus metrics endpoint; package otlp sends it OTLP and receives
// what it exports.
//
// The harness (this package's non-test files) is shared by the end-to-end
// tests beside it, internal/docscheck's tests, dedupload's demo and the
// benchmark driver. Every process it starts is stopped by PID.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/procfs"
)

// The loopback addresses a collector's listeners bind, each with port 0: the
// kernel picks a free port as the collector makes the listener, so no other
// process can take it between a pick and a bind, and the address tells
// Start which listener a port belongs to. ListenExtra is for a receiver of
// a test's own (syslog, Fluent Forward). Nothing else listens on these
// addresses with a wildcard, so a restarted collector can bind the ports of
// the one before it again.
const (
	ListenOTLPGRPC = "127.0.1.1:0"
	ListenOTLPHTTP = "127.0.1.2:0"
	MetricsHost    = "127.0.1.3" // the Prometheus reader takes host and port apart
	ListenHealth   = "127.0.1.4:0"
	ListenExtra    = "127.0.1.5:0"
)

// Ports are the addresses (host:port) a running collector listens on, read
// back once it is ready; empty where it has no such listener.
type Ports struct{ OTLPGRPC, OTLPHTTP, Metrics, Health, Extra string }

// MetricsURL is the collector's internal metrics endpoint.
func (p Ports) MetricsURL() string { return "http://" + p.Metrics + "/metrics" }

// OTLPHTTPURL is the base URL of the collector's OTLP/HTTP receiver.
func (p Ports) OTLPHTTPURL() string { return "http://" + p.OTLPHTTP }

// Names of the exporters Config defines when given a sink.
const (
	SinkGRPCExporter = "otlp_grpc/sink"
	SinkHTTPExporter = "otlp_http/sink"
)

// Config is the part of a collector's config that says where it listens and
// where it exports, for the collector to merge with the configs that say
// what it does (later --config files override earlier ones; maps merge,
// lists are replaced): health_check, the otlp receiver (gRPC and HTTP) and
// its own metrics at level (Prometheus text, named exactly as the
// instruments write them: no unit or type suffix, no scope labels), on the
// addresses of at, or port 0 of the Listen addresses where at has none. With
// a sink, two exporters to it, SinkGRPCExporter and SinkHTTPExporter,
// without retry_on_failure and sending_queue, so that an export error goes
// straight back to the processor and the sender. It defines no pipeline.
func Config(level string, sink interface {
	GRPCEndpoint() string
	HTTPEndpoint() string
}, at Ports) map[string]any {
	or := func(addr, fresh string) string {
		if addr != "" {
			return addr
		}
		return fresh
	}
	metricsPort := 0
	if at.Metrics != "" {
		ap := netip.MustParseAddrPort(at.Metrics)
		metricsPort = int(ap.Port())
	}
	cfg := map[string]any{
		"extensions": map[string]any{"health_check": map[string]any{"endpoint": or(at.Health, ListenHealth)}},
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": or(at.OTLPGRPC, ListenOTLPGRPC)},
			"http": map[string]any{"endpoint": or(at.OTLPHTTP, ListenOTLPHTTP)},
		}}},
		"service": map[string]any{
			"extensions": []string{"health_check"},
			"telemetry": map[string]any{"metrics": map[string]any{"level": level, "readers": []any{map[string]any{
				"pull": map[string]any{"exporter": map[string]any{"prometheus": map[string]any{
					"host": MetricsHost, "port": metricsPort,
					"without_units": true, "without_type_suffix": true, "without_scope_info": true,
				}}},
			}}}},
		},
	}
	if sink != nil {
		noRetry := func(m map[string]any) map[string]any {
			m["retry_on_failure"] = map[string]any{"enabled": false}
			m["sending_queue"] = map[string]any{"enabled": false}
			return m
		}
		cfg["exporters"] = map[string]any{
			SinkGRPCExporter: noRetry(map[string]any{"endpoint": sink.GRPCEndpoint(), "tls": map[string]any{"insecure": true}}),
			SinkHTTPExporter: noRetry(map[string]any{"endpoint": sink.HTTPEndpoint()}),
		}
	}
	return cfg
}

// WriteConfig writes a config (JSON is YAML) to path, readable only by its
// owner.
func WriteConfig(path string, cfg any) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Collector is one running collector process.
type Collector struct {
	// PID is the process id; Stop and Kill signal exactly this process.
	PID int
	// Ports are the addresses its listeners got.
	Ports Ports

	done     chan struct{} // closed once the process has exited
	waitErr  error
	stopOnce sync.Once
	stopErr  error
}

// Start starts binary with the --config arguments (files or confmap URIs,
// merged in order), env added to its environment, its output written to the
// file log. It waits, bounded by ctx, until health_check reports ready (the
// collector has started every component), then reads the ports its
// listeners got from /proc. If the process exits first (a bad config, a
// component that fails to start) or ctx ends, the process is stopped and
// the error says which; log tells why.
func Start(ctx context.Context, binary, log string, env []string, configs ...string) (*Collector, error) {
	out, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary)
	for _, c := range configs {
		cmd.Args = append(cmd.Args, "--config", c)
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a ^C aimed at `go test` or `make demo` reaches
	// it only through Stop. Pdeathsig: a test binary killed by -timeout runs
	// no cleanup, and the collector must not outlive it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("e2e: start %s: %w", binary, err)
	}
	c := &Collector{PID: cmd.Process.Pid, done: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		out.Close()
		close(c.done)
	}()
	if err := c.waitReady(ctx); err != nil {
		c.Kill()
		return nil, err
	}
	return c, nil
}

// waitReady polls until the health_check listener answers 200, then reads
// the ports.
func (c *Collector) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c.readPorts()
		if c.Ports.Health != "" {
			if resp, err := client.Get("http://" + c.Ports.Health + "/"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					c.readPorts() // every listener is up once the collector is ready
					return nil
				}
			}
		}
		select {
		case <-c.done:
			return fmt.Errorf("e2e: collector (pid %d) exited before it was ready: %v", c.PID, c.waitErr)
		case <-ctx.Done():
			return fmt.Errorf("e2e: collector (pid %d) not ready (health_check at %q): %w", c.PID, c.Ports.Health, ctx.Err())
		case <-tick.C:
		}
	}
}

// readPorts sets Ports from the process's listening TCP sockets: the
// sockets among its open files that its /proc/PID/net/tcp lists in state
// LISTEN, by the address each is bound to. It leaves Ports as they are
// while the process has no /proc (exited, or not yet).
func (c *Collector) readPorts() {
	p, err1 := procfs.NewProc(c.PID)
	fs, err2 := procfs.NewFS(fmt.Sprintf("/proc/%d", c.PID))
	if err1 != nil || err2 != nil {
		return
	}
	fds, err1 := p.FileDescriptorTargets()
	tcp, err2 := fs.NetTCP()
	if err1 != nil || err2 != nil {
		return
	}
	byHost := map[string]string{}
	for _, l := range tcp {
		if l.St == 0x0A && slices.Contains(fds, fmt.Sprintf("socket:[%d]", l.Inode)) {
			byHost[l.LocalAddr.String()] = net.JoinHostPort(l.LocalAddr.String(), strconv.FormatUint(l.LocalPort, 10))
		}
	}
	hostOf := func(listen string) string { h, _, _ := net.SplitHostPort(listen); return h }
	c.Ports = Ports{OTLPGRPC: byHost[hostOf(ListenOTLPGRPC)], OTLPHTTP: byHost[hostOf(ListenOTLPHTTP)],
		Metrics: byHost[MetricsHost], Health: byHost[hostOf(ListenHealth)], Extra: byHost[hostOf(ListenExtra)]}
}

// Stop sends SIGTERM, waits up to grace for a clean shutdown (the collector
// drains its pipelines on the way), then sends SIGKILL. It returns an error
// if the process had to be killed or did not exit cleanly. Stop is
// idempotent.
func (c *Collector) Stop(grace time.Duration) error {
	c.stopOnce.Do(func() {
		select {
		case <-c.done:
		default:
			_ = syscall.Kill(c.PID, syscall.SIGTERM)
		}
		select {
		case <-c.done:
			if c.waitErr != nil {
				c.stopErr = fmt.Errorf("e2e: collector (pid %d) exited: %w", c.PID, c.waitErr)
			}
		case <-time.After(grace):
			_ = syscall.Kill(c.PID, syscall.SIGKILL)
			<-c.done
			c.stopErr = fmt.Errorf("e2e: collector (pid %d) did not stop within %s of SIGTERM and was killed", c.PID, grace)
		}
	})
	return c.stopErr
}

// Kill sends SIGKILL, as a crash or the OOM killer would, and waits for the
// process to exit. A later Stop does nothing and returns nil.
func (c *Collector) Kill() {
	c.stopOnce.Do(func() {
		select {
		case <-c.done:
		default:
			_ = syscall.Kill(c.PID, syscall.SIGKILL)
			<-c.done
		}
	})
}
