package main

import (
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

// sample is the demo sample (testdata/demo-logs.json: one OTLP/JSON request
// per line) and what it holds, computed from the file alone: a record is a
// repeat if an identical record (same resource, scope and record) came
// earlier. The processor counts a repeat of a record already in its request
// under tier batch, whatever came before, and any other under tier local.
type sample struct {
	requests                                []plog.Logs
	records, unique, dupSameReq, dupEarlier int
}

func readSample(path string) (*sample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s := &sample{}
	seen := map[string]int{} // identity -> the last request it appeared in
	for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		ld, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs(line)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, i+1, err)
		}
		s.requests = append(s.requests, ld)
		s.records += ld.LogRecordCount()
		for _, rl := range ld.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					// The record with its resource and scope, encoded: equal
					// encodings are byte-identical records.
					one := plog.NewLogs()
					orl := one.ResourceLogs().AppendEmpty()
					rl.Resource().CopyTo(orl.Resource())
					osl := orl.ScopeLogs().AppendEmpty()
					sl.Scope().CopyTo(osl.Scope())
					lr.CopyTo(osl.LogRecords().AppendEmpty())
					enc, _ := (&plog.ProtoMarshaler{}).MarshalLogs(one)
					last, dup := seen[string(enc)]
					seen[string(enc)] = i
					switch {
					case !dup:
						s.unique++
					case last == i:
						s.dupSameReq++
					default:
						s.dupEarlier++
					}
				}
			}
		}
	}
	return s, nil
}

// runDemo is `make demo`: it starts bin on config, with listeners of its
// own and an OTLP sink as the logs pipeline's exporter, sends it the sample
// file data over OTLP/HTTP, and prints what was sent, what the sink
// received and what the processor's metrics say; it fails if they disagree.
func runDemo(bin, config, data string, w io.Writer) (err error) {
	smp, err := readSample(data)
	if err != nil {
		return err
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
	listen, logPath := filepath.Join(dir, "listeners-and-sink.yaml"), filepath.Join(dir, "collector.log")
	if err := e2e.WriteConfig(listen, e2e.Config("detailed", sink, e2e.Ports{})); err != nil {
		return err
	}
	defer func() {
		if b, rerr := os.ReadFile(logPath); err != nil && rerr == nil {
			fmt.Fprintf(w, "--- collector output ---\n%s--- end of collector output ---\n", b)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	export := "yaml:service::pipelines::logs::exporters: [" + e2e.SinkGRPCExporter + "]"
	col, err := e2e.Start(ctx, bin, logPath, nil, config, listen, export)
	if err != nil {
		return err
	}
	defer func() { _ = col.Stop(10 * time.Second) }()
	fmt.Fprintf(w, "started %s (pid %d) with %s: OTLP/HTTP %s, metrics %s, exporting to a sink at %s\n",
		bin, col.PID, config, col.Ports.OTLPHTTP, col.Ports.MetricsURL(), sink.GRPCEndpoint())
	sender, err := otlp.NewClient(otlp.HTTP, col.Ports.OTLPHTTPURL())
	if err != nil {
		return err
	}
	defer sender.Close()
	for i, ld := range smp.requests {
		if err := sender.SendLogs(ctx, ld); err != nil {
			return fmt.Errorf("request %d of %s: %w", i+1, data, err)
		}
	}
	fmt.Fprintf(w, "sent %d requests from %s: %d records, %d distinct, %d repeats (%d within their request, %d of an earlier request)\n",
		len(smp.requests), data, smp.records, smp.unique, smp.dupSameReq+smp.dupEarlier, smp.dupSameReq, smp.dupEarlier)
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
	dropped := smp.records - delivered
	fmt.Fprintf(w, "sent %d, delivered %d, dropped %d duplicates\ndedup metrics scraped from %s:\n", smp.records, delivered, dropped, col.Ports.MetricsURL())
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
	sum := func(name string, l e2e.Labels) int {
		l["processor"], l["otel_signal"] = "dedup", "logs"
		return int(sc.Sum(name, l))
	}
	check("records delivered to the sink", delivered, smp.unique)
	check(records+`{outcome="unique"}`, sum(records, e2e.Labels{"outcome": "unique"}), delivered)
	check(records+`{outcome="duplicate"}`, sum(records, e2e.Labels{"outcome": "duplicate"}), dropped)
	check(records+" (all outcomes)", sum(records, e2e.Labels{}), smp.records)
	check(duplicates+" (all tiers)", sum(duplicates, e2e.Labels{}), dropped)
	check(duplicates+`{tier="batch"}`, sum(duplicates, e2e.Labels{"tier": "batch"}), smp.dupSameReq)
	check(duplicates+`{tier="local"}`, sum(duplicates, e2e.Labels{"tier": "local"}), smp.dupEarlier)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(w, "OK: the sample, the sink and the processor's metrics agree")
	return nil
}
