package loadgen

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"sync"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// sink is an otlp.Sink that counts what a run delivered: records, distinct
// identities (whole content and event.id), each request's payload.
type sink struct {
	*otlp.Sink
	*otlp.Faults

	mu        sync.Mutex
	byContent map[[32]byte]int // accepted records by whole content
	byEventID map[string]int   // accepted records by event.id
	payloads  []string         // sha256 of each accepted request's payload
}

func newSink(t testing.TB) *sink {
	t.Helper()
	o, err := otlp.NewSink()
	if err != nil {
		t.Fatal(err)
	}
	f := &otlp.Faults{}
	o.Gate = f.Gate
	t.Cleanup(func() { _ = o.Close() })
	s := &sink{Sink: o, Faults: f, byContent: map[[32]byte]int{}, byEventID: map[string]int{}}
	o.OnLogs = s.accept
	return s
}

// fail makes the next n requests fail with gRPC code c.
func (s *sink) fail(n int, c codes.Code) {
	s.FailWith(status.Error(c, "the sink refused the request"))
	s.FailNext(n)
}

func (s *sink) accept(ld plog.Logs) {
	raw, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	sum := sha256.Sum256(raw)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.payloads = append(s.payloads, string(sum[:]))
	for _, rl := range ld.ResourceLogs().All() {
		res := fmt.Sprint(rl.Resource().Attributes().AsRaw())
		for _, sl := range rl.ScopeLogs().All() {
			scope := sl.Scope().Name() + "@" + sl.Scope().Version()
			for _, lr := range sl.LogRecords().All() {
				s.byContent[contentID(res, scope, lr)]++
				ev, _ := lr.Attributes().Get("event.id")
				s.byEventID[ev.Str()]++
			}
		}
	}
}

// contentID is the whole content of a record: resource, scope and every
// field of the record.
func contentID(res, scope string, lr plog.LogRecord) [32]byte {
	return sha256.Sum256(fmt.Appendf(nil, "%s|%s|%d|%d|%d|%s|%s|%v|%s|%s|%d|%s", res, scope,
		lr.Timestamp(), lr.ObservedTimestamp(), lr.SeverityNumber(), lr.SeverityText(),
		lr.Body().AsString(), lr.Attributes().AsRaw(), lr.TraceID(), lr.SpanID(),
		lr.Flags(), lr.EventName()))
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
		attempts: s.Requests(), refused: s.Refused(), records: s.LogRecordCount(),
		distinctContent: len(s.byContent), distinctEventID: len(s.byEventID), payloads: p,
	}
}
