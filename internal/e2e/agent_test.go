package e2e

// A real upstream collector as the agent in front of an otelcol-dedup
// gateway: its OTLP exporter's timeout and retry_on_failure make the copies,
// as they do in production.

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// agentBinary returns otelcol-agent, built on first use (see
// AgentDistribution).
func agentBinary(t *testing.T) string {
	t.Helper()
	start := time.Now()
	defer func() {
		if d := time.Since(start); d > time.Second {
			t.Logf("built the test agent in %s", d.Round(100*time.Millisecond))
		}
	}()
	bin, err := AgentDistribution(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// startAgent starts otelcol-agent with its OTLP receiver, health_check and
// metrics on free ports, and the exporters and pipelines of yaml. It is
// stopped by PID in the test's cleanup.
func startAgent(t *testing.T, yaml string) *running {
	t.Helper()
	return startProcess(t, agentBinary(t), Config("detailed", nil, Ports{}), nil, []string{yaml})
}

// agentExporter is the agent's exporter to the gateway: each attempt times
// out after agentTimeout, and a failed one is retried 100 ms later (no
// jitter), for up to a minute. No sending queue: the agent answers its own
// sender once an attempt was accepted, so the test knows when it is done.
func agentExporter(name, endpoint string) string {
	tls := ""
	if name == "otlp_grpc/gateway" {
		tls = "tls: {insecure: true}\n    "
	}
	return fmt.Sprintf(`
exporters:
  %s:
    endpoint: %q
    %stimeout: %s
    retry_on_failure: {enabled: true, initial_interval: 100ms, randomization_factor: 0, multiplier: 1, max_interval: 100ms, max_elapsed_time: 1m}
    sending_queue: {enabled: false}
service:
  pipelines:
    logs:
      receivers: [otlp]
      exporters: [%s]
`, name, endpoint, tls, agentTimeout, name)
}

const agentTimeout = time.Second

// TestAckedAgentRetries: an upstream collector (otelcol-agent) forwards a
// request of 10 events to an otelcol-dedup gateway whose backend holds the
// export longer than the agent's exporter timeout, so the agent times out
// and retries.
//
//   - Over OTLP/gRPC the attempt's deadline travels with it: the gateway's
//     export of the original is cancelled when the agent gives up (the
//     backend sees its client leave), dedup releases its keys, and the
//     retries are delivered once the backend answers.
//   - Over OTLP/HTTP through a proxy that does not pass a client's abort on
//     (as L7 load balancers may let a backend finish a request whose client
//     left), the gateway goes on exporting the original while the agent's
//     retries arrive beside it: they wait for it. If its export then fails,
//     one retry is delivered; if it succeeds, the retries are duplicates.
//
// Either way the backend receives each event exactly once and the agent's
// sender is told the request was delivered.
func TestAckedAgentRetries(t *testing.T) {
	t.Parallel() // it mostly waits: see TestMain
	const n = 10
	c, _ := eventCorpus(n)
	req := c.batch(span(0, n)...)
	l := func(kv ...string) Labels { return sigLabels("dedup", "logs", kv...) }
	// The gateway's own export waits for the backend as long as it takes.
	const gatewayExport = "exporters:\n  otlp_grpc/sink: {timeout: 30s}\n"

	t.Run("grpc, the deadline reaches the gateway", func(t *testing.T) {
		gw := startCollector(t, nil, ackedPipeline("pending_wait: 1s"), gatewayExport)
		agent := startAgent(t, agentExporter("otlp_grpc/gateway", gw.ports.OTLPGRPC))
		gw.sink.Hold()
		sent := relSendAsync(agent, req)
		// Two attempts given up at the backend; the next one, 100 ms later,
		// finds it answering.
		testkit.WaitFor(t, "2 exports abandoned at the backend", opTimeout, func() bool { return gw.sink.Refused() >= 2 })
		gw.sink.Unhold()
		if err := <-sent; err != nil {
			t.Fatalf("the agent's sender: %v, want delivered", err)
		}
		abandoned := gw.sink.Refused()
		sc := gw.scrape()
		wantMetric(t, sc, metricRecords, l("outcome", "unique"), n)
		// Every abandoned export released its keys.
		wantMetric(t, sc, metricReleased, l(), float64(n*abandoned))
		wantEachOnce(t, gw.sink, c, span(0, n))
		t.Logf("%d attempts abandoned at the backend with the agent's deadline, then one delivered", abandoned)
	})

	for _, originalFails := range []bool{true, false} {
		name := map[bool]string{true: "http, the original's export fails", false: "http, the original's export succeeds"}[originalFails]
		t.Run(name, func(t *testing.T) {
			// pending_wait outlasts the hold: every retry that arrives
			// meanwhile waits for the original.
			gw := startCollector(t, nil, ackedPipeline("pending_wait: 5s"), gatewayExport)
			proxy := newAbortBlindProxy(t, gw.ports.OTLPHTTP)
			agent := startAgent(t, agentExporter("otlp_http/gateway", "http://"+proxy.Addr()))
			gw.sink.Hold()
			sent := relSendAsync(agent, req)
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			testkit.WaitFor(t, "the gateway's export held at the backend", opTimeout, func() bool { return gw.sink.Holding() == 1 })
			// The original and two retries, each on a connection of its own,
			// and no answer to the agent's sender before the original's
			// export is decided.
			answeredEarly := false
			select {
			case err := <-proxy.waitConnections(ctx, 3):
				if err != nil {
					t.Fatalf("the agent made %d attempts, waiting for 3: %v", proxy.connections(), err)
				}
			case err := <-sent:
				answeredEarly = true
				t.Errorf("the agent's sender was answered (%v) while the original's export was still held: a retry was acknowledged on the word of a claim still in flight", err)
			}
			if originalFails {
				gw.sink.FailNext(1)
			}
			gw.sink.Unhold()
			if !answeredEarly {
				if err := <-sent; err != nil {
					t.Fatalf("the agent's sender: %v, want delivered", err)
				}
			}
			// Once the agent's sender is answered the original's batch has
			// settled, unless the answer came early: then wait for it.
			sc := waitScrape(t, gw, "the retries counted unique or released", func(sc Scrape) bool {
				return sc.Sum(metricRecords, l("outcome", "unique")) > 0 || sc.Sum(metricReleased, l()) > 0
			})
			wantMetric(t, sc, metricRecords, l("outcome", "unique"), n)
			wantMetric(t, sc, metricWaitCount, l("result", "refused"), 0)
			if got := sc.Sum(metricWaitCount, l("result", "settled")); got < 1 {
				t.Errorf("%s{result=settled} = %g: no retry waited for the original", metricWaitCount, got)
			}
			released, refused := 0, 0
			if originalFails {
				released, refused = n, 1
			}
			wantMetric(t, sc, metricReleased, l(), float64(released))
			if got := gw.sink.Refused(); got != refused {
				t.Errorf("the backend refused %d exports, want %d", got, refused)
			}
			wantEachOnce(t, gw.sink, c, span(0, n))
			t.Logf("%d attempts reached the gateway; %g of them waited for the original; %g duplicates dropped",
				proxy.connections(), sc.Sum(metricWaitCount, l("result", "settled")), sc.Sum(metricRecords, l("outcome", "duplicate")))
		})
	}
}

// abortBlindProxy is a TCP proxy on 127.0.0.1 that does not pass a client's
// abort on: when a client closes its connection (an OTLP/HTTP exporter does
// when its timeout passes), the proxy keeps its connection to the backend
// open and reads the backend's answer into the void, so the backend goes on
// with the request. Every client connection gets a backend connection of its
// own. Close (in the test's cleanup) closes everything.
type abortBlindProxy struct {
	lis     net.Listener
	backend string
	served  sync.WaitGroup

	mu      sync.Mutex
	conns   []net.Conn
	changed chan struct{} // closed and replaced on every new connection
	closed  bool
}

func newAbortBlindProxy(t *testing.T, backend string) *abortBlindProxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &abortBlindProxy{lis: lis, backend: backend, changed: make(chan struct{})}
	p.served.Go(p.serve)
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port.
func (p *abortBlindProxy) Addr() string { return p.lis.Addr().String() }

func (p *abortBlindProxy) serve() {
	for {
		client, err := p.lis.Accept()
		if err != nil {
			return // closed
		}
		backend, err := net.DialTimeout("tcp", p.backend, 5*time.Second)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			backend.Close()
			return
		}
		p.conns = append(p.conns, client, backend)
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
		// The client's end (or abort) stops here: the backend is not told.
		p.served.Go(func() { _, _ = io.Copy(backend, client) })
		p.served.Go(func() {
			if _, err := io.Copy(client, backend); err == nil {
				client.Close() // the backend closed: so does the proxy
				return
			}
			_, _ = io.Copy(io.Discard, backend) // the client is gone
		})
	}
}

// connections is how many client connections the proxy accepted.
func (p *abortBlindProxy) connections() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns) / 2
}

// waitConnections reports (nil) once the proxy has accepted n client
// connections, or ctx's error.
func (p *abortBlindProxy) waitConnections(ctx context.Context, n int) <-chan error {
	done := make(chan error, 1)
	go func() {
		for {
			p.mu.Lock()
			got, changed := len(p.conns)/2, p.changed
			p.mu.Unlock()
			if got >= n {
				done <- nil
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				done <- ctx.Err()
				return
			}
		}
	}()
	return done
}

func (p *abortBlindProxy) close() {
	p.lis.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.served.Wait()
}
