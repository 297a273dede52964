package main

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

const samplePath = "../../testdata/demo-logs.json"

var update = flag.Bool("update", false, "TestSampleIsGenerated: write the demo sample instead of checking it (make demo-data)")

// TestSampleIsGenerated: the shipped sample is exactly what the generator
// writes, so it can be regenerated and reviewed, never hand-edited.
func TestSampleIsGenerated(t *testing.T) {
	var want bytes.Buffer
	if err := generateSample(&want); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(samplePath, want.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s differs from the generator's output; run: make demo-data", filepath.Clean(samplePath))
	}
}

// TestSampleShape: 1000 records in 20 requests, 300 of them repeats, some
// within their own request and some of an earlier one.
func TestSampleShape(t *testing.T) {
	st, err := readSample(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.requests) != sampleRequests || st.records != sampleRecords || st.unique != sampleRecords-sampleDuplicates {
		t.Errorf("sample has %d requests, %d records, %d distinct; want %d, %d, %d",
			len(st.requests), st.records, st.unique, sampleRequests, sampleRecords, sampleRecords-sampleDuplicates)
	}
	// A repeat of a record already in its request counts there (tier
	// batch), whatever came before: the processor's rule.
	if st.dupSameReq != 124 || st.dupEarlier != 176 {
		t.Errorf("repeats: %d within a request, %d of an earlier one; want 124 and 176",
			st.dupSameReq, st.dupEarlier)
	}
}

// The shipped sample, testdata/demo-logs.json: one OTLP/JSON
// ExportLogsServiceRequest per line (the file exporter's format), sampleRequests
// requests of sampleRequestSize records, sampleDuplicates of which are
// byte-identical copies of an earlier record, sent again in the same request
// or in a later one, the way a retrying exporter or a replaying agent would.
const (
	sampleRequests    = 20
	sampleRequestSize = 50
	sampleRecords     = sampleRequests * sampleRequestSize
	sampleDuplicates  = 300
	// sampleSameRequest is the chance that a duplicate repeats a record of its
	// own request (when that request already has one).
	sampleSameRequest = 0.35
)

var sampleServices = []struct {
	name, version, route string
}{
	{"checkout", "2.3.1", "/api/checkout"},
	{"payments", "1.9.0", "/api/payments/charge"},
	{"search", "5.0.2", "/api/search"},
}

var sampleBase = time.Date(2026, 11, 1, 9, 0, 0, 0, time.UTC)

// sampleRecord is one generated record and the service it belongs to.
type sampleRecord struct {
	service int
	record  plog.LogRecord
}

// generateSample writes the demo sample to w. The output depends on nothing
// but the constants above: regenerating it gives the same bytes.
func generateSample(w io.Writer) error {
	rng := rand.New(rand.NewPCG(2026, 11))
	holder := plog.NewLogs().ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()

	// Which of the slots after the first are duplicates.
	isDup := make([]bool, sampleRecords)
	for _, p := range rng.Perm(sampleRecords - 1)[:sampleDuplicates] {
		isDup[p+1] = true
	}

	var uniques []sampleRecord
	enc := plog.JSONMarshaler{}
	for req := range sampleRequests {
		var slots []sampleRecord
		firstUniqueInReq := len(uniques)
		for i := range sampleRequestSize {
			slot := req*sampleRequestSize + i
			if isDup[slot] {
				var orig sampleRecord
				if len(uniques) > firstUniqueInReq && rng.Float64() < sampleSameRequest {
					orig = uniques[firstUniqueInReq+rng.IntN(len(uniques)-firstUniqueInReq)]
				} else {
					orig = uniques[rng.IntN(len(uniques))]
				}
				slots = append(slots, orig)
				continue
			}
			r := sampleRecord{service: rng.IntN(len(sampleServices)), record: holder.AppendEmpty()}
			fillSampleRecord(rng, len(uniques), r)
			uniques = append(uniques, r)
			slots = append(slots, r)
		}
		line, err := enc.MarshalLogs(sampleRequest(slots))
		if err != nil {
			return err
		}
		if _, err := w.Write(append(line, '\n')); err != nil {
			return err
		}
	}
	return nil
}

// sampleRequest groups a request's records by service: one ResourceLogs and
// one ScopeLogs per service, in order of first appearance, records in order.
func sampleRequest(slots []sampleRecord) plog.Logs {
	ld := plog.NewLogs()
	bySvc := map[int]plog.LogRecordSlice{}
	for _, s := range slots {
		lrs, ok := bySvc[s.service]
		if !ok {
			svc := sampleServices[s.service]
			rl := ld.ResourceLogs().AppendEmpty()
			rl.Resource().Attributes().PutStr("service.name", svc.name)
			rl.Resource().Attributes().PutStr("service.version", svc.version)
			rl.Resource().Attributes().PutStr("deployment.environment.name", "demo")
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName("demo/" + svc.name)
			sl.Scope().SetVersion(svc.version)
			lrs = sl.LogRecords()
			bySvc[s.service] = lrs
		}
		s.record.CopyTo(lrs.AppendEmpty())
	}
	return ld
}

func fillSampleRecord(rng *rand.Rand, n int, r sampleRecord) {
	svc := sampleServices[r.service]
	lr := r.record
	ts := sampleBase.Add(time.Duration(n) * 37 * time.Millisecond)
	lr.SetTimestamp(pcommon.NewTimestampFromTime(ts))
	lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(ts.Add(3 * time.Millisecond)))
	status := 200
	switch x := rng.IntN(100); {
	case x < 6:
		status = 500
	case x < 15:
		status = 404
	}
	switch {
	case status >= 500:
		lr.SetSeverityNumber(plog.SeverityNumberError)
		lr.SetSeverityText("ERROR")
	case status >= 400:
		lr.SetSeverityNumber(plog.SeverityNumberWarn)
		lr.SetSeverityText("WARN")
	default:
		lr.SetSeverityNumber(plog.SeverityNumberInfo)
		lr.SetSeverityText("INFO")
	}
	user := fmt.Sprintf("user-%04d", rng.IntN(500))
	ms := 3 + rng.IntN(400)
	lr.Body().SetStr(fmt.Sprintf("POST %s %d %dms user=%s", svc.route, status, ms, user))
	lr.SetEventName("http.request")
	lr.Attributes().PutStr("event.id", fmt.Sprintf("%016x", rng.Uint64()))
	lr.Attributes().PutStr("http.request.method", "POST")
	lr.Attributes().PutStr("http.route", svc.route)
	lr.Attributes().PutInt("http.response.status_code", int64(status))
	lr.Attributes().PutInt("duration_ms", int64(ms))
	lr.Attributes().PutStr("user.id", user)
	var tid pcommon.TraceID
	var sid pcommon.SpanID
	binary.BigEndian.PutUint64(tid[:8], rng.Uint64())
	binary.BigEndian.PutUint64(tid[8:], rng.Uint64())
	binary.BigEndian.PutUint64(sid[:], rng.Uint64())
	lr.SetTraceID(tid)
	lr.SetSpanID(sid)
}
