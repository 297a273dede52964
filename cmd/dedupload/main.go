// Command dedupload sends OTLP logs with an exact share of duplicates to an
// OTLP/gRPC endpoint (an otelcol-dedup collector, or any OTLP receiver), at
// a set rate or as fast as it can, retrying like an exporter, and prints
// what was acknowledged as one line of JSON. With -demo it runs `make demo`
// instead (runDemo).
//
//	dedupload -records 1000000 -duplicates 0.3 -senders 4
//	dedupload -rate 50000 -seed 7
//	dedupload -demo -bin bin/otelcol-dedup
//
// See README.md beside this file; the engine is internal/loadgen.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// Exit statuses.
const (
	exitOK          = 0
	exitErrors      = 1 // some requests finally failed; the demo failed
	exitUsage       = 2 // bad flags or configuration
	exitInterrupted = 130
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the command, minus the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dedupload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg loadgen.Config
	fs.StringVar(&cfg.Endpoint, "endpoint", "127.0.0.1:4317", "OTLP/gRPC endpoint, host:port; a comma-separated list sends each request to every endpoint at once")
	fs.Int64Var(&cfg.Records, "records", 100_000, "records to send in all")
	fs.Float64Var(&cfg.Duplicates, "duplicates", 0.3, "fraction of the records that are byte-identical copies of earlier ones, in [0, 1): exactly round(records*duplicates)")
	fs.IntVar(&cfg.Batch, "batch", 1000, "records per request")
	fs.IntVar(&cfg.Senders, "senders", 4, "concurrent senders (requests in flight)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "records per second over all senders; 0 = as fast as possible")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "generator seed: the same seed sends the same records; 0 = a random seed (in the summary)")
	demo := fs.Bool("demo", false, "instead: run -bin on -config, send it the sample -data, check what it delivers and counts against the sample (make demo)")
	bin := fs.String("bin", "bin/otelcol-dedup", "with -demo: the otelcol-dedup binary (make build)")
	config := fs.String("config", "testdata/default.yaml", "with -demo: the collector config to demonstrate")
	data := fs.String("data", "testdata/demo-logs.json", "with -demo: OTLP/JSON logs to send, one request per line")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *demo {
		if err := runDemo(*bin, *config, *data, stdout); err != nil {
			fmt.Fprintf(stderr, "dedupload -demo: FAIL: %v\n", err)
			return exitErrors
		}
		return exitOK
	}
	// On the command line a zero means what it says; in loadgen.Config it
	// means the default.
	if fs.NArg() > 0 || cfg.Records == 0 || cfg.Batch == 0 || cfg.Senders == 0 {
		fmt.Fprintln(stderr, "dedupload: want flags only, and -records, -batch and -senders >= 1")
		return exitUsage
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1 + rand.Uint64N(1<<32-1) // small enough to retype
	}
	sum, err := loadgen.Run(ctx, cfg)
	if err != nil && ctx.Err() == nil {
		fmt.Fprintf(stderr, "dedupload: %v\n", err)
		return exitUsage
	}
	js, _ := json.Marshal(sum)
	fmt.Fprintf(stdout, "%s\n", js)
	switch {
	case ctx.Err() != nil:
		return exitInterrupted
	case sum.Errors > 0:
		return exitErrors
	}
	return exitOK
}

// sample is the demo's requests (one OTLP/JSON request a line) and what
// they hold: a record is a repeat if an identical one (resource, scope and
// record) came earlier. The processor counts a repeat of a record already in
// its request under tier batch, whatever came before, any other under local.
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

// runDemo is `make demo`: it starts bin on config exporting logs to a sink,
// sends it the sample file data over OTLP/HTTP, and prints what was sent,
// delivered and counted by the processor; it fails if they disagree.
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
	logPath := filepath.Join(dir, "collector.log")
	listen, _ := json.Marshal(e2e.Config("detailed", sink, e2e.Ports{})) // JSON is YAML
	defer func() {
		if b, rerr := os.ReadFile(logPath); err != nil && rerr == nil {
			fmt.Fprintf(w, "--- collector output ---\n%s--- end of collector output ---\n", b)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	export := "yaml:service::pipelines::logs::exporters: [" + e2e.SinkGRPCExporter + "]"
	col, err := e2e.Start(ctx, bin, logPath, nil, config, "yaml:"+string(listen), export)
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
	check(duplicates+`{caught_by="batch"}`, sum(duplicates, e2e.Labels{"caught_by": "batch"}), smp.dupSameReq)
	check(duplicates+`{caught_by="local"}`, sum(duplicates, e2e.Labels{"caught_by": "local"}), smp.dupEarlier)
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(w, "OK: the sample, the sink and the processor's metrics agree")
	return nil
}
