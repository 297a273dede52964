package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

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
