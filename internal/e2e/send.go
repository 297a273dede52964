package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/pmetric/pmetricotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// GRPCSender sends OTLP over gRPC the way an SDK or agent does: one Export
// call per batch, the server's status returned as the error (use
// status.Code(err) to tell a retryable refusal from a permanent one). Request
// metadata (headers) travels in the context: see WithGRPCMetadata.
type GRPCSender struct {
	conn    *grpc.ClientConn
	logs    plogotlp.GRPCClient
	traces  ptraceotlp.GRPCClient
	metrics pmetricotlp.GRPCClient
}

// NewGRPCSender connects (lazily) to an OTLP/gRPC receiver at endpoint
// ("127.0.0.1:port"), in plaintext.
func NewGRPCSender(endpoint string) (*GRPCSender, error) {
	conn, err := grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	return &GRPCSender{
		conn:    conn,
		logs:    plogotlp.NewGRPCClient(conn),
		traces:  ptraceotlp.NewGRPCClient(conn),
		metrics: pmetricotlp.NewGRPCClient(conn),
	}, nil
}

// SendLogs exports one batch of logs.
func (s *GRPCSender) SendLogs(ctx context.Context, ld plog.Logs) error {
	_, err := s.logs.Export(ctx, plogotlp.NewExportRequestFromLogs(ld))
	return err
}

// SendTraces exports one batch of spans.
func (s *GRPCSender) SendTraces(ctx context.Context, td ptrace.Traces) error {
	_, err := s.traces.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
	return err
}

// SendMetrics exports one batch of metrics.
func (s *GRPCSender) SendMetrics(ctx context.Context, md pmetric.Metrics) error {
	_, err := s.metrics.Export(ctx, pmetricotlp.NewExportRequestFromMetrics(md))
	return err
}

// Close closes the connection.
func (s *GRPCSender) Close() error { return s.conn.Close() }

// WithGRPCMetadata returns ctx carrying the key/value pairs as outgoing gRPC
// metadata (request headers) for GRPCSender's calls, e.g. "X-Scope-OrgID",
// "a". gRPC lowercases the keys; the collector's client.Metadata looks keys
// up case-insensitively.
func WithGRPCMetadata(ctx context.Context, kv ...string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, kv...)
}

// HTTPStatusError is a non-2xx answer of an OTLP/HTTP receiver. 429, 502, 503
// and 504 are retryable in OTLP/HTTP.
type HTTPStatusError struct {
	StatusCode int
	Body       string
}

func (e *HTTPStatusError) Error() string {
	return fmt.Sprintf("OTLP/HTTP: status %d: %s", e.StatusCode, e.Body)
}

// HTTPSender sends OTLP/HTTP protobuf requests (POST application/x-protobuf to
// BaseURL/v1/{logs,traces,metrics}).
type HTTPSender struct {
	// Header holds extra request headers sent with every request (e.g.
	// X-Scope-OrgID for a receiver with include_metadata: true). Set it
	// before the first send; nil sends none.
	Header http.Header

	baseURL string
	client  *http.Client
}

// NewHTTPSender sends to the OTLP/HTTP receiver at baseURL (e.g.
// Ports.OTLPHTTPURL()) over its own connection pool; Close releases it.
func NewHTTPSender(baseURL string) *HTTPSender {
	return &HTTPSender{baseURL: baseURL, client: &http.Client{Transport: &http.Transport{}}}
}

// Close closes the sender's idle connections.
func (s *HTTPSender) Close() { s.client.CloseIdleConnections() }

// SendLogs exports one batch of logs.
func (s *HTTPSender) SendLogs(ctx context.Context, ld plog.Logs) error {
	body, err := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	if err != nil {
		return err
	}
	return s.Post(ctx, "/v1/logs", contentTypeProto, body)
}

// SendTraces exports one batch of spans.
func (s *HTTPSender) SendTraces(ctx context.Context, td ptrace.Traces) error {
	body, err := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	if err != nil {
		return err
	}
	return s.Post(ctx, "/v1/traces", contentTypeProto, body)
}

// SendMetrics exports one batch of metrics.
func (s *HTTPSender) SendMetrics(ctx context.Context, md pmetric.Metrics) error {
	body, err := pmetricotlp.NewExportRequestFromMetrics(md).MarshalProto()
	if err != nil {
		return err
	}
	return s.Post(ctx, "/v1/metrics", contentTypeProto, body)
}

// Post sends one already encoded OTLP request body (contentType
// application/x-protobuf or application/json) to the base URL + path. A non-2xx
// answer is an *HTTPStatusError.
func (s *HTTPSender) Post(ctx context.Context, path, contentType string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	for k, vs := range s.Header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Content-Type", contentType)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	respBody, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode/100 != 2 {
		return &HTTPStatusError{StatusCode: resp.StatusCode, Body: errorBody(resp.Header.Get("Content-Type"), respBody)}
	}
	return nil
}

// errorBody renders an OTLP/HTTP error body: a google.rpc.Status in protobuf
// or JSON, or text.
func errorBody(contentType string, body []byte) string {
	if strings.HasPrefix(contentType, contentTypeProto) {
		var st spb.Status
		if err := proto.Unmarshal(body, &st); err == nil {
			return st.GetMessage()
		}
	}
	return string(bytes.TrimSpace(body))
}
