// Package e2e runs the otelcol-dedup distribution the way users do: it
// builds the binary with ocb through the Makefile (Distribution), starts it
// with its listeners on port 0 of loopback addresses, reads back the ports
// they got and scrapes its metrics. The end-to-end tests beside it, internal/docscheck, dedupload's demo and the benchmark
// driver share it. Every process it starts is stopped by PID.
package e2e

import (
	"cmp"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/procfs"
)

// The loopback addresses a collector's listeners bind, each with port 0:
// the kernel picks a free port as the collector binds, and the address tells
// Start which listener a port belongs to. ListenExtra is for a test's own
// receiver (syslog, Fluent Forward). Nothing else binds these addresses, so
// a restarted collector can bind the ports of the one before it again.
const (
	ListenOTLPGRPC = "127.0.1.1:0"
	ListenOTLPHTTP = "127.0.1.2:0"
	MetricsHost    = "127.0.1.3" // the Prometheus reader takes host and port apart
	ListenHealth   = "127.0.1.4:0"
	ListenExtra    = "127.0.1.5:0"
)

// Ports are the host:port a running collector listens on; empty if none.
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
// exports, to merge with configs that say what it does: health_check, the
// otlp receiver and its own metrics at level (Prometheus, named as the
// instruments write them) on the addresses of at, or the Listen addresses.
// With a sink, SinkGRPCExporter and SinkHTTPExporter to it, without retry or
// queue: an export error goes straight back. It defines no pipeline.
func Config(level string, sink interface {
	GRPCEndpoint() string
	HTTPEndpoint() string
}, at Ports) map[string]any {
	_, port, _ := net.SplitHostPort(at.Metrics)
	metricsPort, _ := strconv.Atoi(port) // 0 where at has none
	cfg := map[string]any{
		"extensions": map[string]any{"health_check": map[string]any{"endpoint": cmp.Or(at.Health, ListenHealth)}},
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": cmp.Or(at.OTLPGRPC, ListenOTLPGRPC)},
			"http": map[string]any{"endpoint": cmp.Or(at.OTLPHTTP, ListenOTLPHTTP)},
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
		off := map[string]any{"enabled": false}
		cfg["exporters"] = map[string]any{
			SinkGRPCExporter: map[string]any{"endpoint": sink.GRPCEndpoint(), "tls": map[string]any{"insecure": true},
				"retry_on_failure": off, "sending_queue": off},
			SinkHTTPExporter: map[string]any{"endpoint": sink.HTTPEndpoint(), "retry_on_failure": off, "sending_queue": off},
		}
	}
	return cfg
}

// WriteConfig writes cfg (JSON is YAML) to path, readable by its owner only.
func WriteConfig(path string, cfg any) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// Collector is one running collector process.
type Collector struct {
	PID   int   // Stop and Kill signal exactly this process
	Ports Ports // the addresses its listeners got

	done     chan struct{} // closed once the process has exited
	waitErr  error
	stopOnce sync.Once
	stopErr  error
}

// Start starts binary with the --config arguments (files or confmap URIs),
// env added to its environment, its output written to the file log, and
// waits, bounded by ctx, until health_check reports ready; then it reads the
// ports its listeners got. If the process exits first or ctx ends, the
// process is stopped and the error says which; log tells why.
func Start(ctx context.Context, binary, log string, env []string, configs ...string) (*Collector, error) {
	return StartFlags(ctx, binary, log, env, nil, configs...)
}

// StartFlags is Start with further command-line flags (--feature-gates=...).
func StartFlags(ctx context.Context, binary, log string, env, flags []string, configs ...string) (*Collector, error) {
	out, err := os.Create(log)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, flags...)
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

// waitReady polls until health_check answers 200, then reads the ports.
func (c *Collector) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		c.readPorts() // no health port yet: the request fails at once
		if resp, err := client.Get("http://" + c.Ports.Health + "/"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				c.readPorts() // every listener is up once the collector is ready
				return nil
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

// readPorts sets Ports from the process's open sockets that its
// /proc/PID/net/tcp lists as LISTEN, by address; it leaves Ports as they are
// while the process has no /proc.
func (c *Collector) readPorts() {
	p, err1 := procfs.NewProc(c.PID)
	fs, err2 := procfs.NewFS(fmt.Sprintf("/proc/%d", c.PID))
	if err1 != nil || err2 != nil {
		return
	}
	fds, err1 := p.FileDescriptorTargets()
	tcp, err2 := fs.NetTCP() //nolint:staticcheck // /proc/net/tcp is enough to count a test collector's sockets; its netlink replacement would be a new dependency
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
// drains its pipelines), then sends SIGKILL. It returns an error if the
// process had to be killed or did not exit cleanly; it is idempotent.
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

// Labels are a series' label pairs; as a filter, a subset to match.
type Labels map[string]string

// Series is one sample of a scrape.
type Series struct {
	Name   string
	Labels Labels
	Value  float64
}

func (s Series) String() string {
	parts := make([]string, 0, len(s.Labels))
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		parts = append(parts, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	return fmt.Sprintf("%s{%s} %g", s.Name, strings.Join(parts, ","), s.Value)
}

// Scrape is every series of one scrape.
type Scrape []Series

// Find returns the series called name whose labels include filter's.
func (sc Scrape) Find(name string, filter Labels) []Series {
	return slices.DeleteFunc(slices.Clone(sc), func(s Series) bool {
		for k, v := range filter {
			if got, ok := s.Labels[k]; !ok || got != v {
				return true
			}
		}
		return s.Name != name
	})
}

// Sum adds the values of the series Find returns; 0 when there are none (a
// counter that was never incremented is not exported).
func (sc Scrape) Sum(name string, filter Labels) float64 {
	var v float64
	for _, s := range sc.Find(name, filter) {
		v += s.Value
	}
	return v
}

// ScrapeMetrics fetches and parses a collector's metrics endpoint at url.
func ScrapeMetrics(ctx context.Context, url string) (Scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	// The classic text format; OpenMetrics would add _total and EOF lines.
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	// A client of its own, closed at once: nothing lingers for goleak.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("e2e: scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("e2e: scrape %s: status %s", url, resp.Status)
	}
	sc, err := ParsePrometheusText(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("e2e: scrape %s: %w", url, err)
	}
	return sc, nil
}

// ParsePrometheusText parses the Prometheus text exposition format (version
// 0.0.4) into one Series per sample: a histogram's _bucket, _sum and _count.
func ParsePrometheusText(r io.Reader) (Scrape, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, err
	}
	var sc Scrape
	for _, name := range slices.Sorted(maps.Keys(families)) {
		samples, err := expfmt.ExtractSamples(&expfmt.DecodeOptions{}, families[name])
		if err != nil {
			return nil, err
		}
		for _, smp := range samples {
			s := Series{Name: string(smp.Metric[model.MetricNameLabel]), Labels: Labels{}, Value: float64(smp.Value)}
			for k, v := range smp.Metric {
				s.Labels[string(k)] = string(v)
			}
			delete(s.Labels, model.MetricNameLabel)
			sc = append(sc, s)
		}
	}
	return sc, nil
}

// Issuer is an OpenID Connect issuer on 127.0.0.1 for the collector's oidc
// extension: a discovery document, a key set (JWKS) and ID tokens signed
// (RS256, with the standard library) with a key made at start.
type Issuer struct {
	// URL is the issuer's URL, the oidc extension's issuer_url.
	URL string

	srv *httptest.Server
	key *rsa.PrivateKey
}

const issuerKeyID = "e2e"

// NewIssuer starts an issuer on a free loopback port; Close stops it.
func NewIssuer() (*Issuer, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	iss := &Issuer{key: key}
	mux := http.NewServeMux()
	// The discovery document's fields the oidc extension (go-oidc) reads:
	// it verifies tokens and never sends a user to log in.
	mux.HandleFunc("GET /.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"issuer": iss.URL, "jwks_uri": iss.URL + "/jwks",
			"id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("GET /jwks", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, map[string]any{"keys": []any{map[string]any{
			"kty": "RSA", "use": "sig", "alg": "RS256", "kid": issuerKeyID,
			"n": b64(key.N.Bytes()),
			"e": b64(big.NewInt(int64(key.E)).Bytes()),
		}}})
	})
	iss.srv = httptest.NewServer(mux) // listens on 127.0.0.1
	iss.URL = iss.srv.URL
	return iss, nil
}

// Close stops the issuer's server.
func (i *Issuer) Close() { i.srv.Close() }

// Token returns an ID token for subject with audience, valid for an hour,
// with the extra claims given (e.g. "groups", "team").
func (i *Issuer) Token(audience, subject string, extra map[string]any) (string, error) {
	now := time.Now()
	claims := map[string]any{
		"iss": i.URL, "sub": subject, "aud": audience,
		"iat": now.Unix(), "exp": now.Add(time.Hour).Unix(),
	}
	maps.Copy(claims, extra)
	header, _ := json.Marshal(map[string]string{"alg": "RS256", "typ": "JWT", "kid": issuerKeyID}) // cannot fail
	payload, err := json.Marshal(claims)
	if err != nil {
		return "", err
	}
	signed := b64(header) + "." + b64(payload)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(nil, i.key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("e2e: sign token: %w", err)
	}
	return signed + "." + b64(sig), nil
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}
