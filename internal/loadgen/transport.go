package loadgen

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	grpcgzip "google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// exporter sends one prepared request. A request is prepared once and sent
// again unchanged on a retry.
type exporter interface {
	prepare(ld plog.Logs) (any, error)
	// export returns how many records the server rejected in a partial
	// success, or an error (an *exportError when it is classified).
	export(ctx context.Context, req any) (rejected int64, err error)
	close()
}

// exportError is a failed attempt, classified like an OTLP exporter does.
type exportError struct {
	err       error
	retryable bool
	// throttle is the delay the server asked for (gRPC RetryInfo, HTTP
	// Retry-After), zero if none.
	throttle time.Duration
}

func (e *exportError) Error() string { return e.err.Error() }
func (e *exportError) Unwrap() error { return e.err }

func newExporter(cfg Config) (exporter, error) {
	if endpoints := strings.Split(cfg.Endpoint, ","); len(endpoints) > 1 {
		var m mirrorExporter
		for _, ep := range endpoints {
			c := cfg
			c.Endpoint = strings.TrimSpace(ep)
			e, err := newExporter(c)
			if err != nil {
				m.close()
				return nil, err
			}
			m = append(m, e)
		}
		return m, nil
	}
	if cfg.Protocol == HTTP {
		return newHTTPExporter(cfg)
	}
	return newGRPCExporter(cfg)
}

// mirrorExporter sends each request to every endpoint at the same moment,
// so that copies race across a fleet; an attempt succeeds when every
// endpoint accepted it, and a retry goes to all of them again.
type mirrorExporter []exporter

// prepare's request is only read by the exports, so the endpoints share it.
func (m mirrorExporter) prepare(ld plog.Logs) (any, error) { return m[0].prepare(ld) }

func (m mirrorExporter) export(ctx context.Context, req any) (int64, error) {
	rejected := make([]int64, len(m))
	errs := make([]error, len(m))
	var wg sync.WaitGroup
	for i, e := range m {
		wg.Go(func() { rejected[i], errs[i] = e.export(ctx, req) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return slices.Max(rejected), nil
}

func (m mirrorExporter) close() {
	for _, e := range m {
		e.close()
	}
}

// ---- OTLP/gRPC ----

type grpcExporter struct {
	conn   *grpc.ClientConn
	client plogotlp.GRPCClient
	md     metadata.MD
	opts   []grpc.CallOption
}

func newGRPCExporter(cfg Config) (*grpcExporter, error) {
	target := cfg.Endpoint
	creds := insecure.NewCredentials()
	switch {
	case strings.HasPrefix(target, "https://"):
		target = strings.TrimPrefix(target, "https://")
		creds = credentials.NewTLS(&tls.Config{MinVersion: tls.VersionTLS12})
	case strings.HasPrefix(target, "http://"):
		target = strings.TrimPrefix(target, "http://")
	}
	target = strings.TrimSuffix(target, "/")
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", cfg.Endpoint, err)
	}
	e := &grpcExporter{conn: conn, client: plogotlp.NewGRPCClient(conn), md: metadata.New(cfg.Headers)}
	if cfg.Compression == "gzip" {
		e.opts = append(e.opts, grpc.UseCompressor(grpcgzip.Name))
	}
	return e, nil
}

func (e *grpcExporter) prepare(ld plog.Logs) (any, error) {
	return plogotlp.NewExportRequestFromLogs(ld), nil
}

func (e *grpcExporter) export(ctx context.Context, req any) (int64, error) {
	if len(e.md) > 0 {
		ctx = metadata.NewOutgoingContext(ctx, e.md)
	}
	resp, err := e.client.Export(ctx, req.(plogotlp.ExportRequest), e.opts...)
	if err != nil {
		return 0, classifyGRPC(err)
	}
	return resp.PartialSuccess().RejectedLogRecords(), nil
}

func (e *grpcExporter) close() { _ = e.conn.Close() }

// classifyGRPC follows the OTLP specification's retryable codes, with
// ResourceExhausted always retryable (the collector's exporter retries it
// only with RetryInfo) and the server's RetryInfo delay honoured.
func classifyGRPC(err error) *exportError {
	st := status.Convert(err)
	e := &exportError{err: err}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		e.retryable = true
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			e.throttle = ri.GetRetryDelay().AsDuration()
		}
	}
	return e
}

// ---- OTLP/HTTP (protobuf) ----

type httpExporter struct {
	url       string
	client    *http.Client
	transport *http.Transport
	headers   map[string]string
	gzip      bool
}

func newHTTPExporter(cfg Config) (*httpExporter, error) {
	u, err := logsURL(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 2 * cfg.Senders
	tr.MaxIdleConnsPerHost = 2 * cfg.Senders
	tr.Proxy = nil // a load test goes where it is told
	return &httpExporter{
		url:       u,
		client:    &http.Client{Transport: tr},
		transport: tr,
		headers:   cfg.Headers,
		gzip:      cfg.Compression == "gzip",
	}, nil
}

// logsURL turns an endpoint into the URL to POST logs to: a scheme is added
// if missing (http), and /v1/logs if the URL has no path.
func logsURL(endpoint string) (string, error) {
	s := strings.TrimSpace(endpoint)
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return "", fmt.Errorf("endpoint %q: want host:port or an http(s) URL", endpoint)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/logs"
	}
	return u.String(), nil
}

func (e *httpExporter) prepare(ld plog.Logs) (any, error) {
	body, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		return nil, err
	}
	if e.gzip {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(body); err != nil {
			return nil, err
		}
		if err := zw.Close(); err != nil {
			return nil, err
		}
		body = buf.Bytes()
	}
	return body, nil
}

func (e *httpExporter) export(ctx context.Context, req any) (int64, error) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(req.([]byte)))
	if err != nil {
		return 0, &exportError{err: err}
	}
	for k, v := range e.headers {
		hr.Header.Set(k, v)
	}
	hr.Header.Set("Content-Type", "application/x-protobuf")
	if e.gzip {
		hr.Header.Set("Content-Encoding", "gzip")
	}
	resp, err := e.client.Do(hr)
	if err != nil {
		// Connection refused, reset, timed out: an exporter retries these.
		return 0, &exportError{err: err, retryable: true}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	_, _ = io.Copy(io.Discard, resp.Body) // keep the connection reusable
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if err != nil || len(body) == 0 {
			return 0, nil // accepted; a partial success cannot be read
		}
		r := plogotlp.NewExportResponse()
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			err = r.UnmarshalJSON(body)
		} else {
			err = r.UnmarshalProto(body)
		}
		if err != nil {
			return 0, nil
		}
		return r.PartialSuccess().RejectedLogRecords(), nil
	}
	e2 := &exportError{err: fmt.Errorf("HTTP %d: %s", resp.StatusCode, httpErrorMessage(resp, body))}
	switch resp.StatusCode {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		e2.retryable = true
		e2.throttle = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	return 0, e2
}

func (e *httpExporter) close() { e.transport.CloseIdleConnections() }

// httpErrorMessage is the message of an OTLP/HTTP error body (a
// google.rpc.Status, protobuf or JSON), else the body's start.
func httpErrorMessage(resp *http.Response, body []byte) string {
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-protobuf") {
		var st spb.Status
		if proto.Unmarshal(body, &st) == nil && st.GetMessage() != "" {
			return st.GetMessage()
		}
	}
	msg := strings.TrimSpace(string(body))
	if len(msg) > 200 {
		msg = msg[:200] + "..."
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return msg
}

// retryAfter parses a Retry-After header: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// classify turns any export error into an *exportError.
func classify(err error) *exportError {
	var e *exportError
	if errors.As(err, &e) {
		return e
	}
	return &exportError{err: err}
}
