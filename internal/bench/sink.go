package bench

import (
	"context"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/encoding/gzip" // the collector's OTLP exporter compresses with gzip by default
)

// Sink is the OTLP/gRPC backend the collector under test exports to. It
// keeps no records, only how many arrived and which identities (the
// load's event.id attribute, the same in every copy of a record), so that a
// run of 10^6 records checks exactly what was delivered for little memory.
type Sink struct {
	lis net.Listener
	srv *grpc.Server

	mu        sync.Mutex
	delivered int64
	seen      map[string]struct{}
}

// NewSink starts a sink on a free loopback port. Close it when done.
func NewSink() (*Sink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Sink{lis: lis, srv: grpc.NewServer(), seen: map[string]struct{}{}}
	plogotlp.RegisterGRPCServer(s.srv, &sinkLogs{s: s})
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// Endpoint is the sink's host:port.
func (s *Sink) Endpoint() string { return s.lis.Addr().String() }

// Counts returns the records delivered and the distinct identities among
// them.
func (s *Sink) Counts() (delivered, distinct int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.delivered, int64(len(s.seen))
}

// WaitFor waits until at least n records were delivered or timeout passed,
// and returns the records delivered.
func (s *Sink) WaitFor(n int64, timeout time.Duration) int64 {
	deadline := time.Now().Add(timeout)
	for {
		d, _ := s.Counts()
		if d >= n || time.Now().After(deadline) {
			return d
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Close stops the server.
func (s *Sink) Close() { s.srv.Stop() }

type sinkLogs struct {
	plogotlp.UnimplementedGRPCServer
	s *Sink
}

func (h *sinkLogs) Export(_ context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	ld := req.Logs()
	var ids []string
	for _, rl := range ld.ResourceLogs().All() {
		for _, sl := range rl.ScopeLogs().All() {
			for _, lr := range sl.LogRecords().All() {
				v, _ := lr.Attributes().Get("event.id")
				ids = append(ids, v.Str())
			}
		}
	}
	h.s.mu.Lock()
	h.s.delivered += int64(len(ids))
	for _, id := range ids {
		h.s.seen[id] = struct{}{}
	}
	h.s.mu.Unlock()
	return plogotlp.NewExportResponse(), nil
}
