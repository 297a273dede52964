package e2e

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // the otlp_grpc exporter compresses with gzip by default
	"google.golang.org/grpc/status"
)

// Sink is an OTLP backend for a collector's exporters to send to: an OTLP/gRPC
// server and an OTLP/HTTP server (protobuf or JSON, gzip or not) for logs,
// traces and metrics, both on 127.0.0.1. It keeps a copy of everything it
// accepted and can be told to refuse requests with a retryable error (the
// next ones, or a share of them at random), to answer slowly, or to hold
// requests until told to let them through.
type Sink struct {
	grpcLis net.Listener
	grpcSrv *grpc.Server
	httpLis net.Listener
	httpSrv *http.Server
	served  sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every accepted or refused request
	failNext int
	failRand *rand.Rand // not nil while FailRandomly is in force
	failP    float64
	latency  time.Duration
	refused  int
	refusedN int // items in refused requests
	requests int
	hold     chan struct{} // not nil while Hold is in force; closed by Unhold
	holding  int           // requests waiting on hold
	logs     []plog.Logs
	traces   []ptrace.Traces
	metrics  []pmetric.Metrics
}

// NewSink starts a sink on two free loopback ports. Close it when done.
func NewSink() (*Sink, error) {
	grpcLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	httpLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		grpcLis.Close()
		return nil, err
	}
	s := &Sink{grpcLis: grpcLis, httpLis: httpLis, changed: make(chan struct{})}

	s.grpcSrv = grpc.NewServer()
	plogotlp.RegisterGRPCServer(s.grpcSrv, &sinkLogs{s: s})
	ptraceotlp.RegisterGRPCServer(s.grpcSrv, &sinkTraces{s: s})
	pmetricotlp.RegisterGRPCServer(s.grpcSrv, &sinkMetrics{s: s})

	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/logs", s.serveHTTP(func(body []byte, json bool) (decoded, error) {
		req := plogotlp.NewExportRequest()
		if err := unmarshal(req, body, json); err != nil {
			return decoded{}, err
		}
		return decoded{req.Logs().LogRecordCount(), func() { s.addLogs(req.Logs()) }, plogotlp.NewExportResponse()}, nil
	}))
	mux.HandleFunc("POST /v1/traces", s.serveHTTP(func(body []byte, json bool) (decoded, error) {
		req := ptraceotlp.NewExportRequest()
		if err := unmarshal(req, body, json); err != nil {
			return decoded{}, err
		}
		return decoded{req.Traces().SpanCount(), func() { s.addTraces(req.Traces()) }, ptraceotlp.NewExportResponse()}, nil
	}))
	mux.HandleFunc("POST /v1/metrics", s.serveHTTP(func(body []byte, json bool) (decoded, error) {
		req := pmetricotlp.NewExportRequest()
		if err := unmarshal(req, body, json); err != nil {
			return decoded{}, err
		}
		return decoded{req.Metrics().DataPointCount(), func() { s.addMetrics(req.Metrics()) }, pmetricotlp.NewExportResponse()}, nil
	}))
	s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	s.served.Add(2)
	go func() { defer s.served.Done(); _ = s.grpcSrv.Serve(grpcLis) }()
	go func() { defer s.served.Done(); _ = s.httpSrv.Serve(httpLis) }()
	return s, nil
}

// GRPCEndpoint is the host:port of the OTLP/gRPC server (an otlp_grpc
// exporter's endpoint, with tls.insecure).
func (s *Sink) GRPCEndpoint() string { return s.grpcLis.Addr().String() }

// HTTPEndpoint is the base URL of the OTLP/HTTP server (an otlp_http
// exporter's endpoint).
func (s *Sink) HTTPEndpoint() string { return "http://" + s.httpLis.Addr().String() }

// FailNext makes the next n requests, of any signal and over either
// protocol, fail with a retryable error: gRPC Unavailable, HTTP 503. Refused
// requests are not recorded.
func (s *Sink) FailNext(n int) {
	s.mu.Lock()
	s.failNext = n
	s.mu.Unlock()
}

// FailRandomly makes every request from now on fail, like FailNext, with
// probability p (0 stops it), drawn from a generator seeded with seed: the
// sink's n-th decision is the same on every run, whichever request it falls
// to. FailNext and Hold are decided first.
func (s *Sink) FailRandomly(p float64, seed uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failP = p
	s.failRand = nil
	if p > 0 {
		s.failRand = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	}
}

// SetLatency makes every request from now on wait d before it is decided, as
// a slow backend does; a request whose client gives up meanwhile is refused.
func (s *Sink) SetLatency(d time.Duration) {
	s.mu.Lock()
	s.latency = d
	s.mu.Unlock()
}

// Requests is how many requests the sink answered, refused ones included.
func (s *Sink) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests
}

// Refused is how many requests the sink refused: on FailNext's or
// FailRandomly's orders, or because their client gave up while they waited.
func (s *Sink) Refused() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused
}

// RefusedItems is how many log records, spans or data points the refused
// requests carried.
func (s *Sink) RefusedItems() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refusedN
}

// Logs returns the log batches the sink accepted, in arrival order.
func (s *Sink) Logs() []plog.Logs {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]plog.Logs(nil), s.logs...)
}

// Traces returns the trace batches the sink accepted, in arrival order.
func (s *Sink) Traces() []ptrace.Traces {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]ptrace.Traces(nil), s.traces...)
}

// Metrics returns the metric batches the sink accepted, in arrival order.
func (s *Sink) Metrics() []pmetric.Metrics {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pmetric.Metrics(nil), s.metrics...)
}

// LogRecordCount is how many log records the sink accepted.
func (s *Sink) LogRecordCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ld := range s.logs {
		n += ld.LogRecordCount()
	}
	return n
}

// SpanCount is how many spans the sink accepted.
func (s *Sink) SpanCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, td := range s.traces {
		n += td.SpanCount()
	}
	return n
}

// DataPointCount is how many metric data points the sink accepted.
func (s *Sink) DataPointCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, md := range s.metrics {
		n += md.DataPointCount()
	}
	return n
}

// WaitFor blocks until cond (called with no lock held) returns true after a
// request, or ctx ends.
func (s *Sink) WaitFor(ctx context.Context, cond func(*Sink) bool) error {
	for {
		s.mu.Lock()
		changed := s.changed
		s.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close stops both servers, cutting open connections.
func (s *Sink) Close() error {
	s.Unhold()
	s.grpcSrv.Stop()
	err := s.httpSrv.Close()
	s.served.Wait()
	return err
}

// Hold makes every request from now on wait, before it is recorded, until
// Unhold, the sink closes or the client gives up; an exporter sending to the
// sink blocks as on a stalled backend. Holding says how many are waiting.
// FailNext(n) then Unhold makes n of the held requests fail when released.
func (s *Sink) Hold() {
	s.mu.Lock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
	s.mu.Unlock()
}

// Unhold lets the held requests, and later ones, through.
func (s *Sink) Unhold() {
	s.mu.Lock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
	s.mu.Unlock()
}

// Holding is how many requests are waiting on Hold.
func (s *Sink) Holding() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holding
}

// admit counts a request of items items and decides whether to refuse it.
// While Hold is in force it first waits, then for the latency; a request
// whose client gave up meanwhile is refused.
func (s *Sink) admit(ctx context.Context, items int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests++
	if s.failNext > 0 {
		s.failNext--
		return s.refuseLocked(items)
	}
	if hold := s.hold; hold != nil {
		s.holding++
		s.notifyLocked()
		gaveUp := s.waitLocked(ctx, hold, nil)
		s.holding--
		if gaveUp || s.failNext > 0 {
			// A FailNext given while the request waited applies to it: a
			// backend that stalls, then fails.
			if !gaveUp {
				s.failNext--
			}
			return s.refuseLocked(items)
		}
	}
	if s.latency > 0 {
		timer := time.NewTimer(s.latency)
		gaveUp := s.waitLocked(ctx, nil, timer.C)
		timer.Stop()
		if gaveUp {
			return s.refuseLocked(items)
		}
	}
	if s.failRand != nil && s.failRand.Float64() < s.failP {
		return s.refuseLocked(items)
	}
	return true
}

// waitLocked releases the lock until a or b is ready (nil channels never
// are) or ctx ends, and reports whether ctx ended: the client gave up.
func (s *Sink) waitLocked(ctx context.Context, a <-chan struct{}, b <-chan time.Time) (gaveUp bool) {
	s.mu.Unlock()
	defer s.mu.Lock()
	select {
	case <-a:
	case <-b:
	case <-ctx.Done():
		return true
	}
	return false
}

func (s *Sink) refuseLocked(items int) bool {
	s.refused++
	s.refusedN += items
	s.notifyLocked()
	return false
}

func (s *Sink) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// The add methods keep a copy: the request's memory belongs to the server.
func (s *Sink) addLogs(ld plog.Logs) {
	cp := plog.NewLogs()
	ld.CopyTo(cp)
	s.mu.Lock()
	s.logs = append(s.logs, cp)
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Sink) addTraces(td ptrace.Traces) {
	cp := ptrace.NewTraces()
	td.CopyTo(cp)
	s.mu.Lock()
	s.traces = append(s.traces, cp)
	s.notifyLocked()
	s.mu.Unlock()
}

func (s *Sink) addMetrics(md pmetric.Metrics) {
	cp := pmetric.NewMetrics()
	md.CopyTo(cp)
	s.mu.Lock()
	s.metrics = append(s.metrics, cp)
	s.notifyLocked()
	s.mu.Unlock()
}

var errInjected = status.Error(codes.Unavailable, "e2e sink: injected failure")

type sinkLogs struct {
	plogotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *sinkLogs) Export(ctx context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	if !h.s.admit(ctx, req.Logs().LogRecordCount()) {
		return plogotlp.NewExportResponse(), errInjected
	}
	h.s.addLogs(req.Logs())
	return plogotlp.NewExportResponse(), nil
}

type sinkTraces struct {
	ptraceotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *sinkTraces) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	if !h.s.admit(ctx, req.Traces().SpanCount()) {
		return ptraceotlp.NewExportResponse(), errInjected
	}
	h.s.addTraces(req.Traces())
	return ptraceotlp.NewExportResponse(), nil
}

type sinkMetrics struct {
	pmetricotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *sinkMetrics) Export(ctx context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	if !h.s.admit(ctx, req.Metrics().DataPointCount()) {
		return pmetricotlp.NewExportResponse(), errInjected
	}
	h.s.addMetrics(req.Metrics())
	return pmetricotlp.NewExportResponse(), nil
}

// message is what the three OTLP request and response types have in common.
type message interface {
	MarshalProto() ([]byte, error)
	UnmarshalProto([]byte) error
	MarshalJSON() ([]byte, error)
	UnmarshalJSON([]byte) error
}

type response interface {
	MarshalProto() ([]byte, error)
	MarshalJSON() ([]byte, error)
}

// decoded is one OTLP/HTTP request, decoded: how many items it carries, how
// to record it once admitted, and the response to send.
type decoded struct {
	items  int
	record func()
	resp   response
}

func unmarshal(m message, body []byte, json bool) error {
	if json {
		return m.UnmarshalJSON(body)
	}
	return m.UnmarshalProto(body)
}

const (
	contentTypeProto = "application/x-protobuf"
	contentTypeJSON  = "application/json"
)

// serveHTTP wraps one signal's decode step in OTLP/HTTP framing.
func (s *Sink) serveHTTP(decode func(body []byte, json bool) (decoded, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";")
		var json bool
		switch strings.TrimSpace(ct) {
		case contentTypeProto:
		case contentTypeJSON:
			json = true
		default:
			http.Error(w, "unsupported content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		body, err := readBody(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := decode(body, json)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !s.admit(r.Context(), req.items) {
			http.Error(w, "e2e sink: injected failure", http.StatusServiceUnavailable)
			return
		}
		req.record()
		var out []byte
		if json {
			out, err = req.resp.MarshalJSON()
		} else {
			out, err = req.resp.MarshalProto()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if json {
			w.Header().Set("Content-Type", contentTypeJSON)
		} else {
			w.Header().Set("Content-Type", contentTypeProto)
		}
		_, _ = w.Write(out)
	}
}

func readBody(r *http.Request) ([]byte, error) {
	var body io.Reader = r.Body
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(r.Body)
		if err != nil {
			return nil, err
		}
		defer gz.Close()
		body = gz
	default:
		return nil, fmt.Errorf("unsupported content encoding %q (configure the exporter with compression: gzip or none)", enc)
	}
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	if err != nil {
		return nil, errors.Join(errors.New("reading request body"), err)
	}
	return b, nil
}
