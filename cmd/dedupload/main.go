// Command dedupload sends OTLP logs with a known share of duplicates to an
// OTLP/gRPC or OTLP/HTTP endpoint (an otelcol-dedup collector, or any OTLP
// receiver), at a set rate or as fast as it can, with an exporter's retry
// behaviour, and prints what was acknowledged as one line of JSON. With
// -demo it runs `make demo` instead (demo.go).
//
//	dedupload -records 1000000 -duplicates 0.3 -senders 4
//	dedupload -protocol http -rate 50000 -duration 1m -headers X-Scope-OrgID=team-a
//	dedupload -key event.id -json | jq .duplicates
//	dedupload -demo -bin bin/otelcol-dedup
//
// See README.md beside this file; the engine is internal/loadgen.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
)

// Exit statuses.
const (
	exitOK          = 0
	exitErrors      = 1 // some requests finally failed; the demo failed
	exitUsage       = 2 // bad flags or configuration
	exitInterrupted = 130
)

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	sigs := make(chan os.Signal, 3)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		// First signal: stop gracefully (requests in flight finish, the
		// summary is printed). Second: cut requests in flight. Third: exit.
		for n := 1; ; n++ {
			<-sigs
			switch n {
			case 1:
				close(stop)
			case 2:
				cancel()
			default:
				os.Exit(exitInterrupted)
			}
		}
	}()
	os.Exit(run(ctx, os.Args[1:], stop, os.Stdout, os.Stderr))
}

// run is the command, minus the process: it returns the exit status.
func run(ctx context.Context, args []string, stop <-chan struct{}, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dedupload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := loadgen.Config{Duplicates: 0.3, Stop: stop}.Defaults()
	cfg.Endpoint = ""
	var key, headers, startTime, progress string
	var retry, jsonOnly, ignoreErrors bool
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "OTLP endpoint: host:port (gRPC; http:// or https:// for plaintext or TLS) or host:port / URL (HTTP; /v1/logs appended when the URL has no path) (default 127.0.0.1:4317 for grpc, 127.0.0.1:4318 for http); a comma-separated list sends each request to every endpoint at once")
	fs.StringVar(&cfg.Protocol, "protocol", cfg.Protocol, "grpc or http (OTLP/HTTP protobuf)")
	fs.StringVar(&cfg.Compression, "compression", cfg.Compression, "none or gzip")
	fs.Int64Var(&cfg.Records, "records", cfg.Records, "records to send in all")
	fs.Float64Var(&cfg.Duplicates, "duplicates", cfg.Duplicates, "fraction of the records that are copies of earlier ones, in [0, 1): exactly round(records*duplicates)")
	fs.IntVar(&cfg.Batch, "batch", cfg.Batch, "records per request")
	fs.IntVar(&cfg.Senders, "senders", cfg.Senders, "concurrent senders (requests in flight)")
	fs.Float64Var(&cfg.Rate, "rate", 0, "records per second over all senders; 0 = as fast as possible")
	fs.StringVar(&key, "key", string(cfg.Key), "what a copy shares with its original: content (a byte-identical retry) or event.id (a re-stamped replay with the same event.id attribute)")
	fs.BoolVar(&retry, "retry", true, "resend a request that failed with a retryable error (gRPC Unavailable, ResourceExhausted, ...; HTTP 429/502/503/504) with exponential backoff")
	fs.DurationVar(&cfg.Retry.InitialInterval, "retry-initial", cfg.Retry.InitialInterval, "first retry backoff")
	fs.Float64Var(&cfg.Retry.Multiplier, "retry-multiplier", cfg.Retry.Multiplier, "backoff multiplier")
	fs.DurationVar(&cfg.Retry.MaxInterval, "retry-max-interval", cfg.Retry.MaxInterval, "longest backoff")
	fs.DurationVar(&cfg.Retry.MaxElapsedTime, "retry-max-elapsed", cfg.Retry.MaxElapsedTime, "give up on a request this long after its first attempt; 0 = never")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "timeout of one request attempt")
	fs.Uint64Var(&cfg.Seed, "seed", 0, "generator seed: the same seed sends the same records; 0 = a random seed (printed in the summary)")
	fs.StringVar(&headers, "headers", "", "request headers / gRPC metadata, k=v,k2=v2 (e.g. X-Scope-OrgID=tenant-a)")
	fs.BoolVar(&jsonOnly, "json", false, "print only the JSON summary line on stdout")
	fs.DurationVar(&cfg.Duration, "duration", 0, "stop after this long (requests in flight finish); 0 = no cap")
	fs.StringVar(&startTime, "start-time", "", "base of the record timestamps: RFC 3339, or now (default "+loadgen.DefaultStartTime.Format(time.RFC3339)+", so a seed alone fixes the stream)")
	fs.StringVar(&progress, "progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always, never")
	fs.BoolVar(&ignoreErrors, "ignore-errors", false, "exit 0 even if requests failed")
	demo := fs.Bool("demo", false, "instead: run -bin on -config, send it the sample -data, check what it delivers and counts against the sample (make demo)")
	bin := fs.String("bin", "bin/otelcol-dedup", "with -demo: the otelcol-dedup binary (make build)")
	config := fs.String("config", "testdata/default.yaml", "with -demo: the collector config to demonstrate")
	data := fs.String("data", "testdata/demo-logs.json", "with -demo: OTLP/JSON logs to send, one request per line")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `Usage: dedupload [flags]

Sends OTLP logs with an exact share of duplicates and prints a JSON summary
{"sent","unique","duplicates","requests","retries","errors","failed_records",
"seconds","records_per_second",...}. Exit status: 0, 1 if requests failed
(unless -ignore-errors), 2 for bad flags, 130 if interrupted.

Examples:
  dedupload -records 1000000 -duplicates 0.3
  dedupload -protocol http -endpoint 127.0.0.1:4318 -rate 50000 -duration 1m
  dedupload -key event.id -headers X-Scope-OrgID=team-a -json
  dedupload -demo (make demo: exit 1 if the collector disagrees with the sample)

Flags:
`)
		fs.PrintDefaults()
	}
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
	var errs []error
	check := func(bad bool, format string, args ...any) {
		if bad {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	check(fs.NArg() > 0, "unexpected argument %q (flags only)", fs.Arg(0))
	check(cfg.Records == 0, "records must be >= 1, got 0")
	check(cfg.Batch == 0 || cfg.Senders == 0, "batch and senders must be >= 1, got %d and %d", cfg.Batch, cfg.Senders)
	check(cfg.Timeout == 0 || cfg.Retry.InitialInterval == 0, "timeout and retry-initial must be > 0, got 0s")
	check(progress != "auto" && progress != "always" && progress != "never", "progress must be auto, always or never, got %q", progress)
	cfg.Key, cfg.Retry.Disabled = loadgen.Key(key), !retry
	cfg.Protocol, cfg.Compression = strings.ToLower(cfg.Protocol), strings.ToLower(cfg.Compression)
	if cfg.Retry.MaxElapsedTime == 0 {
		cfg.Retry.MaxElapsedTime = -1 // never give up
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1 + rand.Uint64N(1<<32-1) // small enough to retype
	}
	if startTime == "now" {
		cfg.StartTime = time.Now()
	} else if t, err := time.Parse(time.RFC3339Nano, startTime); startTime != "" {
		check(err != nil, "start-time must be RFC 3339 or now, got %q", startTime)
		cfg.StartTime = t
	}
	if f, ok := stderr.(*os.File); progress == "always" || progress == "auto" && ok && term.IsTerminal(int(f.Fd())) {
		cfg.Progress = stderr
	}
	var err error
	cfg.Headers, err = loadgen.ParseHeaders(headers)
	cfg = cfg.Defaults()
	if err = errors.Join(append(errs, err, cfg.Validate())...); err != nil {
		fmt.Fprintf(stderr, "dedupload: %v\n", err)
		return exitUsage
	}

	sum, err := loadgen.Run(ctx, cfg)
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(stderr, "dedupload: %v\n", err)
		return exitUsage
	}
	interrupted := err != nil
	select {
	case <-stop:
		interrupted = true
	default:
	}
	if !jsonOnly {
		g := loadgen.Group
		fmt.Fprintf(stdout, "dedupload: %s/%s records acknowledged by %s (%s) in %.2fs: %s records/s\n",
			g(sum.Sent), g(cfg.Records), cfg.Endpoint, cfg.Protocol, sum.Seconds, g(int64(sum.RecordsPerSecond)))
		fmt.Fprintf(stdout, "  unique %s, duplicates %s (key %s; originals in the same request %s, same sender %s, other senders %s)\n",
			g(sum.Unique), g(sum.Duplicates), cfg.Key, g(sum.CopiesInBatch), g(sum.CopiesSameSender), g(sum.CopiesOtherSender))
		fmt.Fprintf(stdout, "  requests %s, retries %s, errors %s, failed records %s; latency p50 %.2f ms, p99 %.2f ms\n",
			g(sum.Requests), g(sum.Retries), g(sum.Errors), g(sum.FailedRecords), sum.LatencyP50*1e3, sum.LatencyP99*1e3)
		if sum.LastError != "" {
			fmt.Fprintf(stdout, "  last error: %s\n", sum.LastError)
		}
		fmt.Fprintf(stdout, "  seed %d (the same stream again: -seed %d)\n", sum.Seed, sum.Seed)
	}
	fmt.Fprintln(stdout, sum.JSON())
	switch {
	case interrupted:
		return exitInterrupted
	case sum.Errors > 0 && !ignoreErrors:
		return exitErrors
	}
	return exitOK
}
