package loadgen

import (
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// sink is an in-process OTLP logs backend on 127.0.0.1: a gRPC server and an
// HTTP server (POST /v1/logs, protobuf). It counts what it accepts: records,
// distinct identities (whole content and event.id), request payloads; it
// can refuse the first requests with a chosen error and reject records in a
// partial success.
type sink struct {
	grpcAddr  string
	httpAddr  string
	countOnly bool // benchmarks: count records, nothing else

	mu         sync.Mutex
	attempts   int              // requests received, refused ones included
	refused    int              // requests refused on fail's orders
	records    int              // records accepted
	byContent  map[[32]byte]int // accepted records by whole content
	byEventID  map[string]int   // accepted records by event.id
	payloads   []string         // sha256 of each accepted request's payload
	headers    []map[string]string
	failLeft   int
	failGRPC   codes.Code
	failHTTP   int
	rejectEach int64 // partial success: records rejected per request
}

type sinkLogs struct {
	plogotlp.UnimplementedGRPCServer
	s *sink
}

func (l *sinkLogs) Export(ctx context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	h := map[string]string{}
	for k, v := range md {
		h[k] = strings.Join(v, ",")
	}
	s := l.s
	if s.countOnly {
		n := req.Logs().LogRecordCount()
		s.mu.Lock()
		s.attempts++
		s.records += n
		s.mu.Unlock()
		return plogotlp.NewExportResponse(), nil
	}
	if ok, _ := s.admit(h); !ok {
		return plogotlp.ExportResponse{}, status.Error(s.failGRPC, "sink refused the request")
	}
	raw, err := req.MarshalProto()
	if err != nil {
		return plogotlp.ExportResponse{}, status.Error(codes.Internal, err.Error())
	}
	return s.accept(req.Logs(), raw), nil
}

func newSink(t testing.TB) *sink {
	t.Helper()
	s := &sink{byContent: map[[32]byte]int{}, byEventID: map[string]int{}}

	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	plogotlp.RegisterGRPCServer(gs, &sinkLogs{s: s})
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gl.Close()
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/logs", s.serveHTTP)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s.grpcAddr, s.httpAddr = gl.Addr().String(), hl.Addr().String()

	var wg sync.WaitGroup
	wg.Go(func() { _ = gs.Serve(gl) })
	wg.Go(func() { _ = hs.Serve(hl) })
	t.Cleanup(func() {
		gs.Stop()
		_ = hs.Close()
		wg.Wait()
	})
	return s
}

// endpoint is the sink's address for a protocol.
func (s *sink) endpoint(protocol string) string {
	if protocol == HTTP {
		return s.httpAddr
	}
	return s.grpcAddr
}

// fail makes the next n requests fail: gRPC code c, HTTP status h.
func (s *sink) fail(n int, c codes.Code, h int) {
	s.mu.Lock()
	s.failLeft, s.failGRPC, s.failHTTP = n, c, h
	s.mu.Unlock()
}

func (s *sink) admit(headers map[string]string) (ok bool, httpStatus int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.attempts++
	s.headers = append(s.headers, headers)
	if s.failLeft > 0 {
		s.failLeft--
		s.refused++
		return false, s.failHTTP
	}
	return true, 0
}

func (s *sink) accept(ld plog.Logs, raw []byte) plogotlp.ExportResponse {
	sum := sha256.Sum256(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payloads = append(s.payloads, string(sum[:]))
	rls := ld.ResourceLogs()
	for i := range rls.Len() {
		rl := rls.At(i)
		res := fmt.Sprint(rl.Resource().Attributes().AsRaw())
		sls := rl.ScopeLogs()
		for j := range sls.Len() {
			sl := sls.At(j)
			scope := sl.Scope().Name() + "@" + sl.Scope().Version()
			lrs := sl.LogRecords()
			for k := range lrs.Len() {
				lr := lrs.At(k)
				s.records++
				s.byContent[contentID(res, scope, lr)]++
				ev, _ := lr.Attributes().Get("event.id")
				s.byEventID[ev.Str()]++
			}
		}
	}
	resp := plogotlp.NewExportResponse()
	if s.rejectEach > 0 {
		resp.PartialSuccess().SetRejectedLogRecords(s.rejectEach)
		resp.PartialSuccess().SetErrorMessage("sink rejected some records")
	}
	return resp
}

// contentID is the whole content of a record: resource, scope and every
// field of the record.
func contentID(res, scope string, lr plog.LogRecord) [32]byte {
	h := sha256.New()
	fmt.Fprintf(h, "%s|%s|%d|%d|%d|%s|%s|%v|%s|%s|%d|%s", res, scope,
		lr.Timestamp(), lr.ObservedTimestamp(), lr.SeverityNumber(), lr.SeverityText(),
		lr.Body().AsString(), lr.Attributes().AsRaw(), pcommon.TraceID(lr.TraceID()), pcommon.SpanID(lr.SpanID()),
		lr.Flags(), lr.EventName())
	var out [32]byte
	copy(out[:], h.Sum(nil))
	return out
}

func (s *sink) serveHTTP(w http.ResponseWriter, r *http.Request) {
	var rd io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		rd = zr
	}
	body, err := io.ReadAll(rd)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.countOnly {
		req := plogotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.attempts++
		s.records += req.Logs().LogRecordCount()
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		return
	}
	h := map[string]string{}
	for k, v := range r.Header {
		h[strings.ToLower(k)] = strings.Join(v, ",")
	}
	if ok, code := s.admit(h); !ok {
		if code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "0")
		}
		http.Error(w, "sink refused the request", code)
		return
	}
	req := plogotlp.NewExportRequest()
	if r.Header.Get("Content-Type") != "application/x-protobuf" {
		http.Error(w, "want application/x-protobuf", http.StatusUnsupportedMediaType)
		return
	}
	if err := req.UnmarshalProto(body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := s.accept(req.Logs(), body)
	out, _ := resp.MarshalProto()
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

type sinkCounts struct {
	attempts, refused, records, distinctContent, distinctEventID int
	payloads                                                     []string
}

func (s *sink) counts() sinkCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := append([]string(nil), s.payloads...)
	sort.Strings(p)
	return sinkCounts{
		attempts: s.attempts, refused: s.refused, records: s.records,
		distinctContent: len(s.byContent), distinctEventID: len(s.byEventID), payloads: p,
	}
}

func (s *sink) allHeaders() []map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]map[string]string(nil), s.headers...)
}
