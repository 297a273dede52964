// Command dedupload sends OTLP logs with a known share of duplicates to an
// OTLP/gRPC or OTLP/HTTP endpoint (an otelcol-dedup collector, or any OTLP
// receiver), at a set rate or as fast as it can, with an exporter's retry
// behaviour, and prints what was acknowledged as one line of JSON.
//
//	dedupload -records 1000000 -duplicates 0.3 -senders 4
//	dedupload -protocol http -rate 50000 -duration 1m -headers X-Scope-OrgID=team-a
//	dedupload -key event.id -json | jq .duplicates
//
// See README.md beside this file; the engine is package loadgen.
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

	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
)

// Exit statuses.
const (
	exitOK          = 0
	exitErrors      = 1 // some requests finally failed
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
		n := 0
		for range sigs {
			n++
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
	var (
		endpoint     = fs.String("endpoint", "", "OTLP endpoint: host:port (gRPC; http:// or https:// for plaintext or TLS) or host:port / URL (HTTP; /v1/logs appended when the URL has no path) (default 127.0.0.1:4317 for grpc, 127.0.0.1:4318 for http); a comma-separated list sends each request to every endpoint at once")
		protocol     = fs.String("protocol", loadgen.GRPC, "grpc or http (OTLP/HTTP protobuf)")
		compression  = fs.String("compression", "none", "none or gzip")
		records      = fs.Int64("records", loadgen.DefaultRecords, "records to send in all")
		duplicates   = fs.Float64("duplicates", 0.3, "fraction of the records that are copies of earlier ones, in [0, 1): exactly round(records*duplicates)")
		batch        = fs.Int("batch", loadgen.DefaultBatch, "records per request")
		senders      = fs.Int("senders", loadgen.DefaultSenders, "concurrent senders (requests in flight)")
		rate         = fs.Float64("rate", 0, "records per second over all senders; 0 = as fast as possible")
		key          = fs.String("key", string(loadgen.KeyContent), "what a copy shares with its original: content (a byte-identical retry) or event.id (a re-stamped replay with the same event.id attribute)")
		retry        = fs.Bool("retry", true, "resend a request that failed with a retryable error (gRPC Unavailable, ResourceExhausted, ...; HTTP 429/502/503/504) with exponential backoff")
		retryInitial = fs.Duration("retry-initial", loadgen.DefaultInitialInterval, "first retry backoff")
		retryMult    = fs.Float64("retry-multiplier", loadgen.DefaultMultiplier, "backoff multiplier")
		retryMaxInt  = fs.Duration("retry-max-interval", loadgen.DefaultMaxInterval, "longest backoff")
		retryMaxElap = fs.Duration("retry-max-elapsed", loadgen.DefaultMaxElapsed, "give up on a request this long after its first attempt; 0 = never")
		timeout      = fs.Duration("timeout", loadgen.DefaultTimeout, "timeout of one request attempt")
		seed         = fs.Uint64("seed", 0, "generator seed: the same seed sends the same records; 0 = a random seed (printed in the summary)")
		headers      = fs.String("headers", "", "request headers / gRPC metadata, k=v,k2=v2 (e.g. X-Scope-OrgID=tenant-a)")
		jsonOnly     = fs.Bool("json", false, "print only the JSON summary line on stdout")
		duration     = fs.Duration("duration", 0, "stop after this long (requests in flight finish); 0 = no cap")
		startTime    = fs.String("start-time", "", "base of the record timestamps: RFC 3339, or now (default "+loadgen.DefaultStartTime.Format(time.RFC3339)+", so a seed alone fixes the stream)")
		progress     = fs.String("progress", "auto", "progress bar on stderr: auto (when stderr is a terminal), always, never")
		ignoreErrors = fs.Bool("ignore-errors", false, "exit 0 even if requests failed")
		demo         = fs.Bool("demo", false, "instead: run -bin on -config, send it the sample -data, check what it delivers and counts against the sample (make demo)")
		bin          = fs.String("bin", "bin/otelcol-dedup", "with -demo: the otelcol-dedup binary (make build)")
		config       = fs.String("config", "testdata/default.yaml", "with -demo: the collector config to demonstrate")
		data         = fs.String("data", "testdata/demo-logs.json", "with -demo: OTLP/JSON logs to send, one request per line")
		generate     = fs.String("generate", "", "with -demo: write the demo sample to this file instead, and exit")
	)
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
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dedupload: unexpected argument %q (flags only)\n", fs.Arg(0))
		return exitUsage
	}

	if *demo {
		var err error
		if *generate != "" {
			err = writeSample(*generate)
		} else {
			err = runDemo(*bin, *config, *data, stdout)
		}
		if err != nil {
			fmt.Fprintf(stderr, "dedupload -demo: FAIL: %v\n", err)
			return exitErrors
		}
		return exitOK
	}
	hdrs, err := loadgen.ParseHeaders(*headers)
	if err != nil {
		return usageError(stderr, err)
	}
	cfg := loadgen.Config{
		Endpoint:    *endpoint,
		Protocol:    strings.ToLower(*protocol),
		Compression: strings.ToLower(*compression),
		Headers:     hdrs,
		Records:     *records,
		Duplicates:  *duplicates,
		Batch:       *batch,
		Senders:     *senders,
		Rate:        *rate,
		Key:         loadgen.Key(*key),
		Seed:        *seed,
		Retry: loadgen.RetryConfig{
			Disabled:        !*retry,
			InitialInterval: *retryInitial,
			Multiplier:      *retryMult,
			MaxInterval:     *retryMaxInt,
			MaxElapsedTime:  *retryMaxElap,
		},
		Timeout:  *timeout,
		Duration: *duration,
		Stop:     stop,
	}
	// Zero means "the default" in loadgen.Config; on the command line it
	// means what it says.
	if *records == 0 {
		return usageError(stderr, errors.New("records must be >= 1, got 0"))
	}
	if *batch == 0 || *senders == 0 {
		return usageError(stderr, fmt.Errorf("batch and senders must be >= 1, got %d and %d", *batch, *senders))
	}
	if *timeout == 0 {
		return usageError(stderr, errors.New("timeout must be > 0, got 0s"))
	}
	if *retryInitial == 0 {
		return usageError(stderr, errors.New("retry-initial must be > 0, got 0s"))
	}
	if *retryMaxElap == 0 {
		cfg.Retry.MaxElapsedTime = -1 // never give up
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1 + rand.Uint64N(1<<32-1) // small enough to retype
	}
	switch *startTime {
	case "":
	case "now":
		cfg.StartTime = time.Now()
	default:
		t, err := time.Parse(time.RFC3339Nano, *startTime)
		if err != nil {
			return usageError(stderr, fmt.Errorf("start-time must be RFC 3339 or now, got %q", *startTime))
		}
		cfg.StartTime = t
	}
	switch *progress {
	case "always":
		cfg.Progress = stderr
	case "auto":
		if f, ok := stderr.(*os.File); ok && isTerminal(f) {
			cfg.Progress = stderr
		}
	case "never":
	default:
		return usageError(stderr, fmt.Errorf("progress must be auto, always or never, got %q", *progress))
	}
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return usageError(stderr, err)
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

	if !*jsonOnly {
		printHuman(stdout, cfg, sum)
	}
	fmt.Fprintln(stdout, sum.JSON())

	switch {
	case interrupted:
		return exitInterrupted
	case sum.Errors > 0 && !*ignoreErrors:
		return exitErrors
	}
	return exitOK
}

func usageError(w io.Writer, err error) int {
	fmt.Fprintf(w, "dedupload: %v\n", err)
	return exitUsage
}

func printHuman(w io.Writer, cfg loadgen.Config, s loadgen.Summary) {
	g := loadgen.Group
	fmt.Fprintf(w, "dedupload: %s/%s records acknowledged by %s (%s) in %.2fs: %s records/s\n",
		g(s.Sent), g(cfg.Records), cfg.Endpoint, cfg.Protocol, s.Seconds, g(int64(s.RecordsPerSecond)))
	fmt.Fprintf(w, "  unique %s, duplicates %s (key %s; originals in the same request %s, same sender %s, other senders %s)\n",
		g(s.Unique), g(s.Duplicates), cfg.Key, g(s.CopiesInBatch), g(s.CopiesSameSender), g(s.CopiesOtherSender))
	fmt.Fprintf(w, "  requests %s, retries %s, errors %s, failed records %s; latency p50 %.2f ms, p99 %.2f ms\n",
		g(s.Requests), g(s.Retries), g(s.Errors), g(s.FailedRecords), s.LatencyP50*1e3, s.LatencyP99*1e3)
	if s.LastError != "" {
		fmt.Fprintf(w, "  last error: %s\n", s.LastError)
	}
	fmt.Fprintf(w, "  seed %d (the same stream again: -seed %d)\n", s.Seed, s.Seed)
}
