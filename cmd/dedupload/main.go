// Command dedupload sends OTLP logs with an exact share of duplicates to an
// OTLP/gRPC or OTLP/HTTP endpoint (an otelcol-dedup collector, or any OTLP
// receiver), at a set rate or as fast as it can, retrying like an exporter,
// and prints what was acknowledged as one line of JSON. With -demo it runs
// `make demo` instead (demo.go).
//
//	dedupload -records 1000000 -duplicates 0.3 -senders 4
//	dedupload -protocol http -rate 50000 -seed 7
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
	"syscall"

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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command, minus the process: it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dedupload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg loadgen.Config
	fs.StringVar(&cfg.Endpoint, "endpoint", "", "OTLP endpoint: host:port (gRPC), host:port or URL (HTTP; /v1/logs when the URL has no path) (default 127.0.0.1:4317 for grpc, 127.0.0.1:4318 for http); a comma-separated list sends each request to every endpoint at once")
	fs.StringVar(&cfg.Protocol, "protocol", loadgen.GRPC, "grpc or http (OTLP/HTTP protobuf)")
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
	fmt.Fprintln(stdout, sum.JSON())
	switch {
	case ctx.Err() != nil:
		return exitInterrupted
	case sum.Errors > 0:
		return exitErrors
	}
	return exitOK
}
