// Package otlp is OTLP from both ends, for the tools and the tests: a Client
// that sends like an SDK or an exporter, and a Sink that receives what a
// collector under test exports.
package otlp

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // lets the sink take the exporters' gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The protocols a Client speaks.
const (
	GRPC = "grpc"
	HTTP = "http" // OTLP/HTTP, protobuf
)

// Client sends OTLP export requests to one endpoint, one call per request,
// and returns a refusal as a gRPC status or an *HTTPError. Set Header before
// the first request; it is safe for concurrent use.
type Client struct {
	// Header is sent with every request: HTTP headers, or gRPC metadata.
	Header http.Header

	conn *grpc.ClientConn // gRPC
	base string           // HTTP: the receiver's base URL
	http *http.Client
}

// NewClient connects (lazily) to an OTLP receiver in plaintext: endpoint is
// host:port, or for HTTP also a base URL.
func NewClient(protocol, endpoint string) (*Client, error) {
	switch protocol {
	case GRPC:
		conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
		}
		return &Client{conn: conn}, nil
	case HTTP:
		if !strings.Contains(endpoint, "://") {
			endpoint = "http://" + endpoint
		}
		return &Client{base: strings.TrimSuffix(endpoint, "/"), http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, nil
	}
	return nil, fmt.Errorf("protocol must be grpc or http, got %q", protocol)
}

// Close releases the connection (gRPC) or the idle connections (HTTP).
func (c *Client) Close() error {
	if c.conn != nil {
		return c.conn.Close()
	}
	c.http.CloseIdleConnections()
	return nil
}

// SendLogs exports one logs request.
func (c *Client) SendLogs(ctx context.Context, ld plog.Logs) error {
	return send(ctx, c, "/v1/logs", plogotlp.NewExportRequestFromLogs(ld), plogotlp.NewGRPCClient)
}

// SendTraces exports one traces request.
func (c *Client) SendTraces(ctx context.Context, td ptrace.Traces) error {
	return send(ctx, c, "/v1/traces", ptraceotlp.NewExportRequestFromTraces(td), ptraceotlp.NewGRPCClient)
}

// SendMetrics exports one metrics request.
func (c *Client) SendMetrics(ctx context.Context, md pmetric.Metrics) error {
	return send(ctx, c, "/v1/metrics", pmetricotlp.NewExportRequestFromMetrics(md), pmetricotlp.NewGRPCClient)
}

// send exports req over gRPC, with Header as metadata (keys lowercased), or
// posts it to path over HTTP.
func send[Req interface{ MarshalProto() ([]byte, error) }, Resp any, G interface {
	Export(context.Context, Req, ...grpc.CallOption) (Resp, error)
}](ctx context.Context, c *Client, path string, req Req, newClient func(*grpc.ClientConn) G) error {
	if c.conn == nil {
		return c.post(ctx, path, req)
	}
	for k, vs := range c.Header {
		for _, v := range vs {
			ctx = metadata.AppendToOutgoingContext(ctx, k, v)
		}
	}
	_, err := newClient(c.conn).Export(ctx, req)
	return err
}

// post sends one OTLP/HTTP request.
func (c *Client) post(ctx context.Context, path string, req interface{ MarshalProto() ([]byte, error) }) error {
	body, err := req.MarshalProto()
	if err != nil {
		return err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range c.Header {
		hr.Header[http.CanonicalHeaderKey(k)] = vs
	}
	hr.Header.Set("Content-Type", "application/x-protobuf")
	r, err := c.http.Do(hr)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if r.StatusCode/100 == 2 {
		return nil
	}
	// A google.rpc.Status body's message, else the body, else the status.
	msg := strings.TrimSpace(string(b))
	var st spb.Status
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-protobuf") && proto.Unmarshal(b, &st) == nil {
		msg = st.GetMessage()
	}
	if msg == "" {
		msg = http.StatusText(r.StatusCode)
	}
	return &HTTPError{StatusCode: r.StatusCode, Message: msg[:min(len(msg), 200)]}
}

// HTTPError is a non-2xx answer of an OTLP/HTTP receiver.
type HTTPError struct {
	StatusCode int
	Message    string
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("OTLP/HTTP status %d: %s", e.StatusCode, e.Message)
}

// Sink is an OTLP backend on 127.0.0.1: OTLP/gRPC and OTLP/HTTP (protobuf,
// gzip or not) servers for logs, traces and metrics, on ports of their own.
// It keeps a copy of every request it accepts, unless OnLogs takes the logs.
// Its methods are safe for concurrent use.
type Sink struct {
	// OnLogs, if set before the first request, takes every accepted logs
	// request instead of the sink keeping a copy. It runs under the sink's
	// lock.
	OnLogs func(ld plog.Logs)
	// Gate, if set before the first request, decides each request of items
	// (log records, spans or data points): it calls keep to accept it, or
	// returns the refusal, which the client receives as its gRPC status
	// (Unavailable if it is none) or the matching HTTP status.
	Gate func(ctx context.Context, items int, keep func()) error

	grpcLis, httpLis net.Listener
	grpcSrv          *grpc.Server
	httpSrv          *http.Server
	served           sync.WaitGroup

	mu      sync.Mutex
	items   [3]int // log records, spans and data points accepted
	logs    []plog.Logs
	traces  []ptrace.Traces
	metrics []pmetric.Metrics
}

// NewSink starts a sink on two loopback ports the kernel picks.
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
	s := &Sink{grpcLis: grpcLis, httpLis: httpLis, grpcSrv: grpc.NewServer()}
	logs, traces, metrics := &logsServer{s: s}, &tracesServer{s: s}, &metricsServer{s: s}
	plogotlp.RegisterGRPCServer(s.grpcSrv, logs)
	ptraceotlp.RegisterGRPCServer(s.grpcSrv, traces)
	pmetricotlp.RegisterGRPCServer(s.grpcSrv, metrics)
	mux := http.NewServeMux()
	mux.Handle("/v1/logs", serveHTTP(plogotlp.NewExportRequest, logs.Export))
	mux.Handle("/v1/traces", serveHTTP(ptraceotlp.NewExportRequest, traces.Export))
	mux.Handle("/v1/metrics", serveHTTP(pmetricotlp.NewExportRequest, metrics.Export))
	s.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	s.served.Go(func() { _ = s.grpcSrv.Serve(grpcLis) })
	s.served.Go(func() { _ = s.httpSrv.Serve(httpLis) })
	return s, nil
}

// GRPCEndpoint is the host:port of the OTLP/gRPC server.
func (s *Sink) GRPCEndpoint() string { return s.grpcLis.Addr().String() }

// HTTPEndpoint is the base URL of the OTLP/HTTP server.
func (s *Sink) HTTPEndpoint() string { return "http://" + s.httpLis.Addr().String() }

// Close stops both servers, cutting open connections.
func (s *Sink) Close() error {
	s.grpcSrv.Stop()
	err := s.httpSrv.Close()
	s.served.Wait()
	return err
}

// LogRecordCount is how many log records the sink accepted.
func (s *Sink) LogRecordCount() int { return locked(s, func() int { return s.items[0] }) }

// SpanCount is how many spans the sink accepted.
func (s *Sink) SpanCount() int { return locked(s, func() int { return s.items[1] }) }

// DataPointCount is how many metric data points the sink accepted.
func (s *Sink) DataPointCount() int { return locked(s, func() int { return s.items[2] }) }

// Logs returns the log requests the sink kept, in arrival order.
func (s *Sink) Logs() []plog.Logs { return kept(s, &s.logs) }

// Traces returns the trace requests the sink kept, in arrival order.
func (s *Sink) Traces() []ptrace.Traces { return kept(s, &s.traces) }

// Metrics returns the metric requests the sink kept, in arrival order.
func (s *Sink) Metrics() []pmetric.Metrics { return kept(s, &s.metrics) }

func kept[T any](s *Sink, list *[]T) []T { return locked(s, func() []T { return slices.Clone(*list) }) }

func locked[T any](s *Sink, f func() T) T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f()
}

// receive decides on a request of n items (signal i) and, if the sink
// accepts it, counts it and keeps a copy in kept (the request belongs to the
// server). It returns a refusal as a gRPC status error.
func receive[T interface{ CopyTo(T) }](ctx context.Context, s *Sink, i, n int, data T, fresh func() T, kept *[]T) error {
	keep := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.items[i] += n
		if ld, ok := any(data).(plog.Logs); ok && s.OnLogs != nil {
			s.OnLogs(ld)
			return
		}
		cp := fresh()
		data.CopyTo(cp)
		*kept = append(*kept, cp)
	}
	if s.Gate == nil {
		keep()
		return nil
	}
	if err := s.Gate(ctx, n, keep); err != nil {
		if _, ok := status.FromError(err); !ok {
			err = status.Error(codes.Unavailable, err.Error())
		}
		return err
	}
	return nil
}

type logsServer struct {
	plogotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *logsServer) Export(ctx context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	return plogotlp.NewExportResponse(), receive(ctx, h.s, 0, req.Logs().LogRecordCount(), req.Logs(), plog.NewLogs, &h.s.logs)
}

type tracesServer struct {
	ptraceotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *tracesServer) Export(ctx context.Context, req ptraceotlp.ExportRequest) (ptraceotlp.ExportResponse, error) {
	return ptraceotlp.NewExportResponse(), receive(ctx, h.s, 1, req.Traces().SpanCount(), req.Traces(), ptrace.NewTraces, &h.s.traces)
}

type metricsServer struct {
	pmetricotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *metricsServer) Export(ctx context.Context, req pmetricotlp.ExportRequest) (pmetricotlp.ExportResponse, error) {
	return pmetricotlp.NewExportResponse(), receive(ctx, h.s, 2, req.Metrics().DataPointCount(), req.Metrics(), pmetric.NewMetrics, &h.s.metrics)
}

// httpStatus is the OTLP/HTTP answer to a refusal with a gRPC code.
var httpStatus = map[codes.Code]int{
	codes.InvalidArgument: http.StatusBadRequest, codes.ResourceExhausted: http.StatusTooManyRequests,
	codes.Unavailable: http.StatusServiceUnavailable, codes.DeadlineExceeded: http.StatusGatewayTimeout,
}

// serveHTTP answers OTLP/HTTP requests of one signal with its gRPC export.
func serveHTTP[Req interface{ UnmarshalProto([]byte) error }, Resp interface{ MarshalProto() ([]byte, error) }](
	newReq func() Req, export func(context.Context, Req) (Resp, error),
) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req := newReq()
		body, err := readBody(r)
		if err == nil {
			err = req.UnmarshalProto(body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		resp, err := export(r.Context(), req)
		if err != nil {
			st := status.Convert(err)
			code := cmp.Or(httpStatus[st.Code()], http.StatusInternalServerError)
			http.Error(w, st.Message(), code)
			return
		}
		out, err := resp.MarshalProto()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}
}

// readBody reads a protobuf request body, gunzipped if it says so.
func readBody(r *http.Request) ([]byte, error) {
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		return nil, fmt.Errorf("content type %q: the sink takes application/x-protobuf (the exporters' default encoding)", ct)
	}
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
		return nil, fmt.Errorf("content encoding %q: configure the exporter with compression gzip or none", enc)
	}
	return io.ReadAll(io.LimitReader(body, 64<<20))
}
