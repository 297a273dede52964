package otlp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // lets the sink take the exporters' gzip
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"go.opentelemetry.io/collector/pdata/plog"
)

// The protocols a Client speaks.
const (
	GRPC = "grpc"
	HTTP = "http" // OTLP/HTTP, protobuf
)

// Client sends OTLP export requests to one endpoint the way an SDK or a
// collector's exporter does: one call per request, the server's refusal
// returned as the error, a gRPC status or an *HTTPError (Retryable tells
// whether an exporter would retry it). Set Header before the first request;
// it is safe for concurrent use.
type Client struct {
	// Header is sent with every request: HTTP headers, or gRPC metadata.
	Header http.Header

	conn     *grpc.ClientConn // gRPC
	base     string           // HTTP: scheme and host
	logsPath string           // HTTP: the endpoint's path, or /v1/logs
	http     *http.Client
}

// NewClient connects (lazily) to an OTLP receiver in plaintext. For gRPC,
// endpoint is host:port. For HTTP it is host:port or a URL: logs go to its
// path, /v1/logs if it has none, traces and metrics to /v1/traces and
// /v1/metrics.
func NewClient(protocol, endpoint string) (*Client, error) {
	switch protocol {
	case GRPC:
		conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
		}
		return &Client{conn: conn}, nil
	case HTTP:
		s := endpoint
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
	req := plogotlp.NewExportRequestFromLogs(ld)
	if c.conn != nil {
		_, err := plogotlp.NewGRPCClient(c.conn).Export(c.outgoing(ctx), req)
		return err
	}
	return c.post(ctx, c.logsPath, req)
}

// SendTraces exports one traces request.
func (c *Client) SendTraces(ctx context.Context, td ptrace.Traces) error {
	req := ptraceotlp.NewExportRequestFromTraces(td)
	if c.conn != nil {
		_, err := ptraceotlp.NewGRPCClient(c.conn).Export(c.outgoing(ctx), req)
		return err
	}
	return c.post(ctx, "/v1/traces", req)
}

// SendMetrics exports one metrics request.
func (c *Client) SendMetrics(ctx context.Context, md pmetric.Metrics) error {
	req := pmetricotlp.NewExportRequestFromMetrics(md)
	if c.conn != nil {
		_, err := pmetricotlp.NewGRPCClient(c.conn).Export(c.outgoing(ctx), req)
		return err
	}
	return c.post(ctx, "/v1/metrics", req)
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
	// The message of a google.rpc.Status body, else the body's start, else
	// the status text.
	msg := strings.TrimSpace(string(b))
	var st spb.Status
	if strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-protobuf") && proto.Unmarshal(b, &st) == nil {
		msg = st.GetMessage()
	}
	if msg == "" {
		msg = http.StatusText(r.StatusCode)
	}
	e := &HTTPError{StatusCode: r.StatusCode, Message: msg[:min(len(msg), 200)]}
	if s, err := strconv.Atoi(r.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

// HTTPError is a non-2xx answer of an OTLP/HTTP receiver.
type HTTPError struct {
	StatusCode int
	Message    string
	// RetryAfter is the wait the server asked for (Retry-After, in
	// seconds), if any.
	RetryAfter time.Duration
}

func (e *HTTPError) Error() string {
	return fmt.Sprintf("OTLP/HTTP status %d: %s", e.StatusCode, e.Message)
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
