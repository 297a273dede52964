package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// The demo (dedupload -demo, make demo) shows the otelcol-dedup distribution
// at work: it starts the built binary on a config (testdata/default.yaml,
// with listeners of its own and an OTLP sink in place of the debug
// exporter), sends the shipped sample over OTLP/HTTP, and prints what was
// sent, what the sink received and what the processor's metrics say. It
// fails if the three disagree.

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

// sampleRequestData is one line of the sample file.
type sampleRequestData struct {
	logs    plog.Logs
	records int
}

// sampleStats is what the sample holds, computed from the file alone: a record
// is a duplicate if an identical record (same resource, scope and record
// content) came earlier. The processor counts a copy of a record already in
// the same request under tier batch, whatever came before, and any other
// copy under tier local.
type sampleStats struct {
	requests   []sampleRequestData
	records    int
	unique     int
	dupSameReq int
	dupEarlier int
}

func readSample(r io.Reader) (*sampleStats, error) {
	st := &sampleStats{}
	seen := map[string]int{} // identity -> the last request it appeared in
	dec := plog.JSONUnmarshaler{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		ld, err := dec.UnmarshalLogs(raw)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		req := len(st.requests)
		st.requests = append(st.requests, sampleRequestData{logs: ld, records: ld.LogRecordCount()})
		st.records += ld.LogRecordCount()
		forEachIdentity(ld, func(id string) {
			last, dup := seen[id]
			seen[id] = req
			switch {
			case !dup:
				st.unique++
			case last == req:
				st.dupSameReq++
			default:
				st.dupEarlier++
			}
		})
	}
	return st, sc.Err()
}

// forEachIdentity calls f with the encoding of each record together with its
// resource and scope: equal strings mean byte-identical records.
func forEachIdentity(ld plog.Logs, f func(string)) {
	m := plog.ProtoMarshaler{}
	for i := range ld.ResourceLogs().Len() {
		rl := ld.ResourceLogs().At(i)
		for j := range rl.ScopeLogs().Len() {
			sl := rl.ScopeLogs().At(j)
			for k := range sl.LogRecords().Len() {
				one := plog.NewLogs()
				orl := one.ResourceLogs().AppendEmpty()
				rl.Resource().CopyTo(orl.Resource())
				osl := orl.ScopeLogs().AppendEmpty()
				sl.Scope().CopyTo(osl.Scope())
				sl.LogRecords().At(k).CopyTo(osl.LogRecords().AppendEmpty())
				b, _ := m.MarshalLogs(one)
				f(string(b))
			}
		}
	}
}

// runDemo runs the demo: bin on config, the sample file data.
func runDemo(bin, config, data string, w io.Writer) (err error) {
	f, err := os.Open(data)
	if err != nil {
		return err
	}
	sample, err := readSample(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", data, err)
	}
	sink, err := otlp.NewSink()
	if err != nil {
		return err
	}
	defer sink.Close()
	dir, err := os.MkdirTemp("", "dedupload-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The config's own pipeline, with the demo's listeners and the sink as
	// its exporter.
	listen, export := filepath.Join(dir, "listeners-and-sink.yaml"), filepath.Join(dir, "export-to-sink.yaml")
	if err := e2e.WriteConfig(listen, e2e.Config("detailed", sink, e2e.Ports{})); err != nil {
		return err
	}
	if err := os.WriteFile(export, []byte("service: {pipelines: {logs: {exporters: ["+e2e.SinkGRPCExporter+"]}}}\n"), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "collector.log")
	defer func() {
		if b, rerr := os.ReadFile(logPath); err != nil && rerr == nil {
			fmt.Fprintf(w, "--- collector output ---\n%s--- end of collector output ---\n", b)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	col, err := e2e.Start(ctx, bin, logPath, nil, config, listen, export)
	if err != nil {
		return err
	}
	defer func() { _ = col.Stop(10 * time.Second) }()
	fmt.Fprintf(w, "started %s (pid %d) with %s: OTLP gRPC %s, OTLP/HTTP %s, metrics %s, exporting to a sink at %s\n",
		bin, col.PID, config, col.Ports.OTLPGRPC, col.Ports.OTLPHTTP, col.Ports.MetricsURL(), sink.GRPCEndpoint())

	sender, err := otlp.NewClient(otlp.HTTP, col.Ports.OTLPHTTPURL())
	if err != nil {
		return err
	}
	defer sender.Close()
	for i, req := range sample.requests {
		if err := sender.SendLogs(ctx, req.logs); err != nil {
			return fmt.Errorf("request %d of %s: %w", i+1, data, err)
		}
	}
	fmt.Fprintf(w, "sent %d requests from %s: %d records, %d distinct, %d repeats (%d within their request, %d of an earlier request)\n",
		len(sample.requests), data, sample.records, sample.unique, sample.dupSameReq+sample.dupEarlier, sample.dupSameReq, sample.dupEarlier)
	sc, err := e2e.ScrapeMetrics(ctx, col.Ports.MetricsURL())
	if err != nil {
		return err
	}
	// SIGTERM: the collector drains its pipeline before it exits, so the
	// sink's count is final afterwards.
	if err := col.Stop(30 * time.Second); err != nil {
		return err
	}
	delivered := sink.LogRecordCount()
	dropped := sample.records - delivered
	fmt.Fprintf(w, "sent %d, delivered %d, dropped %d duplicates\ndedup metrics scraped from %s:\n", sample.records, delivered, dropped, col.Ports.MetricsURL())
	const records, duplicates = "otelcol_processor_dedup_records", "otelcol_processor_dedup_duplicates"
	for _, s := range append(sc.Find(records, nil), sc.Find(duplicates, nil)...) {
		fmt.Fprintf(w, "  %v\n", s)
	}
	var errs []error
	check := func(what string, got, want int) {
		if got != want {
			errs = append(errs, fmt.Errorf("%s = %d, want %d", what, got, want))
		}
	}
	sum := func(name string, kv ...string) int {
		l := e2e.Labels{"processor": "dedup", "otel_signal": "logs"}
		for i := 0; i+1 < len(kv); i += 2 {
			l[kv[i]] = kv[i+1]
		}
		return int(sc.Sum(name, l))
	}
	check("records delivered to the sink", delivered, sample.unique)
	check(records+`{outcome="unique"}`, sum(records, "outcome", "unique"), delivered)
	check(records+`{outcome="duplicate"}`, sum(records, "outcome", "duplicate"), dropped)
	check(records+" (all outcomes)", sum(records), sample.records)
	check(duplicates+" (all tiers)", sum(duplicates), dropped)
	check(duplicates+`{tier="batch"}`, sum(duplicates, "tier", "batch"), sample.dupSameReq)
	check(duplicates+`{tier="local"}`, sum(duplicates, "tier", "local"), sample.dupEarlier)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(w, "OK: the sample, the sink and the processor's metrics agree")
	return nil
}

// writeSample writes the demo sample to path.
func writeSample(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := generateSample(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
