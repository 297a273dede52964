// Command dedupdemo shows the otelcol-dedup distribution at work: it starts
// the built binary on the default config (testdata/default.yaml, with free
// loopback ports and an OTLP sink of its own in place of the debug exporter),
// sends the shipped sample testdata/demo-logs.json over OTLP/HTTP (1000 log
// records, 300 of them byte-identical retries), and prints what was sent, what
// the sink received and what the processor's metrics say. It exits non-zero
// if the three disagree.
//
//	make demo
//	go run ./cmd/dedupdemo -bin bin/otelcol-dedup
//	go run ./cmd/dedupdemo -generate testdata/demo-logs.json   # rewrite the sample
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

func main() {
	bin := flag.String("bin", "bin/otelcol-dedup", "the otelcol-dedup binary (make build)")
	config := flag.String("config", "testdata/default.yaml", "the collector config to demonstrate")
	data := flag.String("data", "testdata/demo-logs.json", "OTLP/JSON logs to send, one request per line")
	generate := flag.String("generate", "", "write the demo sample to this file and exit")
	flag.Parse()

	if *generate != "" {
		if err := writeSample(*generate); err != nil {
			fmt.Fprintf(os.Stderr, "dedupdemo: %v\n", err)
			os.Exit(1)
		}
		return
	}
	if err := run(*bin, *config, *data); err != nil {
		fmt.Fprintf(os.Stderr, "dedupdemo: FAIL: %v\n", err)
		os.Exit(1)
	}
}

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

const (
	metricRecords    = "otelcol_processor_dedup_records"
	metricDuplicates = "otelcol_processor_dedup_duplicates"
)

func run(bin, config, data string) (err error) {
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
	dir, err := os.MkdirTemp("", "dedupdemo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// The config's own pipeline, with listeners of the demo's and the sink
	// as its exporter.
	basePath := filepath.Join(dir, "listeners-and-sink.yaml")
	pipelinePath := filepath.Join(dir, "export-to-sink.yaml")
	if err := e2e.WriteConfig(basePath, e2e.Config("detailed", sink, e2e.Ports{})); err != nil {
		return err
	}
	if err := os.WriteFile(pipelinePath, []byte("service:\n  pipelines:\n    logs:\n      exporters: ["+e2e.SinkGRPCExporter+"]\n"), 0o600); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "collector.log")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	col, err := e2e.Start(ctx, bin, logPath, nil, config, basePath, pipelinePath)
	stopped := false
	defer func() {
		if col != nil && !stopped {
			_ = col.Stop(10 * time.Second)
		}
		if err != nil {
			if b, rerr := os.ReadFile(logPath); rerr == nil {
				fmt.Fprintf(os.Stderr, "--- collector output ---\n%s--- end of collector output ---\n", b)
			}
		}
	}()
	if err != nil {
		return fmt.Errorf("%w (run make build first)", err)
	}
	ports := col.Ports
	fmt.Printf("started %s (pid %d) with %s: OTLP gRPC %s, OTLP/HTTP %s, metrics %s, exporting to a sink at %s\n",
		bin, col.PID, config, ports.OTLPGRPC, ports.OTLPHTTP, ports.MetricsURL(), sink.GRPCEndpoint())

	sender, err := otlp.NewClient(otlp.HTTP, ports.OTLPHTTPURL())
	if err != nil {
		return err
	}
	defer sender.Close()
	for i, req := range sample.requests {
		if err := sender.SendLogs(ctx, req.logs); err != nil {
			return fmt.Errorf("request %d of %s: %w", i+1, data, err)
		}
	}
	fmt.Printf("sent %d requests from %s: %d records, %d distinct, %d repeats (%d within their request, %d of an earlier request)\n",
		len(sample.requests), data, sample.records, sample.unique, sample.dupSameReq+sample.dupEarlier, sample.dupSameReq, sample.dupEarlier)

	sc, err := e2e.ScrapeMetrics(ctx, ports.MetricsURL())
	if err != nil {
		return err
	}
	// SIGTERM: the collector flushes its batch processor and exporter before
	// it exits, so the sink's count is final afterwards.
	stopped = true
	if err := col.Stop(30 * time.Second); err != nil {
		return err
	}
	delivered := sink.LogRecordCount()
	dropped := sample.records - delivered
	fmt.Printf("sent %d, delivered %d, dropped %d duplicates\n", sample.records, delivered, dropped)

	fmt.Printf("dedup metrics scraped from %s:\n", ports.MetricsURL())
	for _, name := range []string{metricRecords, metricDuplicates} {
		for _, s := range sc.Find(name, nil) {
			fmt.Printf("  %v\n", s)
		}
	}

	var errs []error
	check := func(what string, got, want float64) {
		if got != want {
			errs = append(errs, fmt.Errorf("%s = %g, want %g", what, got, want))
		}
	}
	l := func(kv ...string) e2e.Labels {
		out := e2e.Labels{"processor": "dedup", "otel_signal": "logs"}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	check("records delivered to the sink", float64(delivered), float64(sample.unique))
	check(metricRecords+`{outcome="unique"}`, sc.Sum(metricRecords, l("outcome", "unique")), float64(delivered))
	check(metricRecords+`{outcome="duplicate"}`, sc.Sum(metricRecords, l("outcome", "duplicate")), float64(dropped))
	check(metricRecords+" (all outcomes)", sc.Sum(metricRecords, l()), float64(sample.records))
	check(metricDuplicates+" (all tiers)", sc.Sum(metricDuplicates, l()), float64(dropped))
	check(metricDuplicates+`{tier="batch"}`, sc.Sum(metricDuplicates, l("tier", "batch")), float64(sample.dupSameReq))
	check(metricDuplicates+`{tier="local"}`, sc.Sum(metricDuplicates, l("tier", "local")), float64(sample.dupEarlier))
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	fmt.Println("OK: the sample, the sink and the processor's metrics agree")
	return nil
}
