package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip" // also lets the sink take the exporters' gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The protocols a Client speaks.
const (
	GRPC = "grpc"
	HTTP = "http" // OTLP/HTTP, protobuf
)

// Client sends OTLP export requests to one endpoint the way an SDK or a
// collector's exporter does: one call per request, the server's refusal
// returned as the error, a gRPC status or an *HTTPError (Retryable tells
// whether an exporter would retry it). Set its fields before the first
// request; it is safe for concurrent use.
type Client struct {
	// Header is sent with every request: HTTP headers, or gRPC metadata.
	Header http.Header
	// Gzip compresses the requests.
	Gzip bool

	conn     *grpc.ClientConn // gRPC
	base     string           // HTTP: scheme and host
	logsPath string           // HTTP: the endpoint's path, or /v1/logs
	http     *http.Client
}

// NewClient connects (lazily) to an OTLP receiver. For gRPC, endpoint is
// host:port, in plaintext unless it starts with https://. For HTTP it is
// host:port or a URL: logs go to its path, /v1/logs if it has none, traces
// and metrics to /v1/traces and /v1/metrics.
func NewClient(protocol, endpoint string) (*Client, error) {
	switch protocol {
	case GRPC:
		creds := insecure.NewCredentials()
		if rest, ok := strings.CutPrefix(endpoint, "https://"); ok {
			endpoint, creds = rest, credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
		}
		conn, err := grpc.NewClient(strings.TrimSuffix(strings.TrimPrefix(endpoint, "http://"), "/"), grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
		}
		return &Client{conn: conn}, nil
	case HTTP:
		s := strings.TrimSpace(endpoint)
		if !strings.Contains(s, "://") {
			s = "http://" + s
		}
		u, err := url.Parse(s)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return nil, fmt.Errorf("endpoint %q: want host:port or an http(s) URL", endpoint)
		}
		c := &Client{base: u.Scheme + "://" + u.Host, logsPath: u.Path, http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
		if c.logsPath == "" || c.logsPath == "/" {
			c.logsPath = "/v1/logs"
		}
		return c, nil
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
	_, err := c.ExportLogs(ctx, ld)
	return err
}

// ExportLogs exports one logs request and returns how many of its records
// the server rejected in a partial success.
func (c *Client) ExportLogs(ctx context.Context, ld plog.Logs) (rejected int64, err error) {
	req, resp := plogotlp.NewExportRequestFromLogs(ld), plogotlp.NewExportResponse()
	if c.conn != nil {
		resp, err = plogotlp.NewGRPCClient(c.conn).Export(c.outgoing(ctx), req, c.callOptions()...)
	} else {
		err = c.post(ctx, c.logsPath, req, resp)
	}
	if err != nil {
		return 0, err
	}
	return resp.PartialSuccess().RejectedLogRecords(), nil
}

// SendTraces exports one traces request.
func (c *Client) SendTraces(ctx context.Context, td ptrace.Traces) error {
	req := ptraceotlp.NewExportRequestFromTraces(td)
	if c.conn != nil {
		_, err := ptraceotlp.NewGRPCClient(c.conn).Export(c.outgoing(ctx), req, c.callOptions()...)
		return err
	}
	return c.post(ctx, "/v1/traces", req, ptraceotlp.NewExportResponse())
}

// SendMetrics exports one metrics request.
func (c *Client) SendMetrics(ctx context.Context, md pmetric.Metrics) error {
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	if c.conn != nil {
		_, err := pmetricotlp.NewGRPCClient(c.conn).Export(c.outgoing(ctx), req, c.callOptions()...)
		return err
	}
	return c.post(ctx, "/v1/metrics", req, pmetricotlp.NewExportResponse())
}

// outgoing adds Header to the request's metadata (gRPC lowercases keys; the
// collector's client.Metadata looks them up case-insensitively).
func (c *Client) outgoing(ctx context.Context) context.Context {
	for k, vs := range c.Header {
		for _, v := range vs {
			ctx = metadata.AppendToOutgoingContext(ctx, k, v)
		}
	}
	return ctx
}

func (c *Client) callOptions() []grpc.CallOption {
	if c.Gzip {
		return []grpc.CallOption{grpc.UseCompressor(grpcgzip.Name)}
	}
	return nil
}

// post sends one OTLP/HTTP request and reads the partial success of a 2xx
// answer into resp.
func (c *Client) post(ctx context.Context, path string, req interface{ MarshalProto() ([]byte, error) },
	resp interface{ UnmarshalProto([]byte) error }) error {
	body, err := req.MarshalProto()
	if err != nil {
		return err
	}
	if c.Gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		_, _ = zw.Write(body)
		if err := zw.Close(); err != nil {
			return err
		}
		body = buf.Bytes()
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range c.Header {
		hr.Header[http.CanonicalHeaderKey(k)] = vs
	}
	hr.Header.Set("Content-Type", "application/x-protobuf")
	if c.Gzip {
		hr.Header.Set("Content-Encoding", "gzip")
	}
	r, err := c.http.Do(hr)
	if err != nil {
		return err
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	isProto := strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-protobuf")
	if r.StatusCode/100 == 2 {
		if isProto && len(b) > 0 {
			_ = resp.UnmarshalProto(b) // a partial success cannot be read otherwise: none
		}
		return nil
	}
	return &HTTPError{StatusCode: r.StatusCode, Message: errorMessage(r.StatusCode, isProto, b),
		RetryAfter: retryAfter(r.Header.Get("Retry-After"), time.Now())}
}

// HTTPError is a non-2xx answer of an OTLP/HTTP receiver.
type HTTPError struct {
	StatusCode int
	Message    string
	// RetryAfter is the wait the server asked for (Retry-After), if any.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("OTLP/HTTP status %d: %s", e.StatusCode, e.Message)
}

// errorMessage is the message of an OTLP/HTTP error body: a google.rpc.Status
// in protobuf, else the body's start, else the status text.
func errorMessage(code int, isProto bool, body []byte) string {
	var st spb.Status
	if isProto && proto.Unmarshal(body, &st) == nil && st.GetMessage() != "" {
		return st.GetMessage()
	}
	if msg := strings.TrimSpace(string(body)); msg != "" {
		return msg[:min(len(msg), 200)]
	}
	return http.StatusText(code)
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Retryable reports whether an OTLP exporter sends a request again after
// err, and how long the server asked it to wait first (gRPC RetryInfo, HTTP
// Retry-After). Retryable are the OTLP specification's gRPC codes, with
// ResourceExhausted always retried; HTTP 429, 502, 503 and 504; and a
// connection that failed or timed out.
func Retryable(err error) (bool, time.Duration) {
	var he *HTTPError
	if errors.As(err, &he) {
		switch he.StatusCode {
		case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
			return true, he.RetryAfter
		}
		return false, 0
	}
	st, ok := status.FromError(err)
	if !ok {
		return true, 0
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
	default:
		return false, 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return true, ri.GetRetryDelay().AsDuration()
		}
	}
	return true, 0
}
