// Package loadgen sends OTLP logs with a known share of duplicates to an
// OTLP/gRPC or OTLP/HTTP endpoint, the way SDKs and exporters do, and reports
// what was acknowledged. It is the engine of dedupload, of the benchmark
// driver's runs and of end-to-end tests:
//
//	sum, err := loadgen.Run(ctx, loadgen.Config{
//		Endpoint: sink.GRPCEndpoint(), Protocol: loadgen.GRPC,
//		Records: 100_000, Duplicates: 0.3, Batch: 1000, Senders: 4,
//	})
//
// The record stream is a pure function of the configuration (seed, records,
// duplicate ratio, batch size, senders, key mode and start time): see
// Generator for what is generated and the ground truth it keeps.
package loadgen

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// Protocols.
const (
	GRPC = otlp.GRPC
	HTTP = otlp.HTTP
)

// Key tells what a copy shares with its original.
type Key string

const (
	// KeyContent: a copy is byte-identical to its original (resource,
	// scope, record), like an exporter's retry of a request that did arrive.
	KeyContent Key = "content"
	// KeyEventID: a copy shares only its original's identity attribute
	// `event.id` (and resource, scope and attributes); its timestamps and body
	// differ, like a replay that re-stamps records. Only a dedup key on
	// attributes["event.id"] recognises it.
	KeyEventID Key = "event.id"
)

// RetryConfig is an exporter's retry_on_failure: a request that failed with a
// retryable error is sent again, unchanged, after an exponential backoff.
// Zero fields take the collector's defaults, save the 60 s elapsed cap that
// keeps a load run bounded.
type RetryConfig struct {
	Disabled            bool          // a failed request is counted and dropped
	InitialInterval     time.Duration // the first backoff (100ms)
	Multiplier          float64       // grows the backoff after each retry (1.5)
	MaxInterval         time.Duration // caps one backoff (5s)
	MaxElapsedTime      time.Duration // gives up this long after the first attempt (60s); < 0: never
	RandomizationFactor float64       // jitters each backoff by ±factor (0.5); < 0: none
}

// Config is one load run. A zero field takes its default, except Duplicates
// (zero: none) and Retry.Disabled.
type Config struct {
	// Endpoint: see otlp.NewClient (default 127.0.0.1:4317 for gRPC,
	// 127.0.0.1:4318 for HTTP). A comma-separated list sends each request to
	// every endpoint at once: copies racing across a fleet.
	Endpoint    string
	Protocol    string // GRPC (default) or HTTP
	Compression string // "none" (default) or "gzip"
	// Headers are sent with every request (gRPC metadata, HTTP headers),
	// e.g. X-Scope-OrgID for a multi-tenant pipeline.
	Headers map[string]string

	Records int64 // records to send in all (100000)
	// Duplicates is the fraction of Records that are copies of records
	// generated earlier, in [0, 1): exactly round(Records*Duplicates) are.
	Duplicates float64
	Batch      int // records per request (1000)
	// Senders is how many requests are in flight at once (4): batch b is
	// sent by sender b mod Senders, in order.
	Senders   int
	Rate      float64   // records per second over all senders; 0: as fast as possible; retries do not count
	Key       Key       // what copies share with their original (KeyContent)
	Seed      uint64    // one seed, one stream
	StartTime time.Time // base of the records' timestamps (DefaultStartTime)

	Retry   RetryConfig
	Timeout time.Duration // bounds one attempt (10s)
	// Duration, if > 0, stops the run after this long: no new request
	// starts, no request is retried, requests in flight finish. Stop, if not
	// nil, does the same when it is closed.
	Duration time.Duration
	Stop     <-chan struct{}

	// Progress, if not nil, receives a progress bar redrawn in place (with
	// carriage returns) every ProgressInterval (200ms), erased at the end.
	Progress         io.Writer
	ProgressInterval time.Duration
}

// DefaultStartTime is the base of the generated timestamps when Config has
// none: fixed, so that a seed alone decides the stream.
var DefaultStartTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

// Defaults returns cfg with every zero field set to its default. Run calls
// it.
func (cfg Config) Defaults() Config {
	orDefault(&cfg.Protocol, GRPC)
	if cfg.Protocol == HTTP {
		orDefault(&cfg.Endpoint, "127.0.0.1:4318")
	}
	orDefault(&cfg.Endpoint, "127.0.0.1:4317")
	orDefault(&cfg.Compression, "none")
	orDefault(&cfg.Records, 100_000)
	orDefault(&cfg.Batch, 1000)
	orDefault(&cfg.Senders, 4)
	orDefault(&cfg.Key, KeyContent)
	orDefault(&cfg.StartTime, DefaultStartTime)
	orDefault(&cfg.Retry.InitialInterval, 100*time.Millisecond)
	orDefault(&cfg.Retry.Multiplier, 1.5)
	orDefault(&cfg.Retry.MaxInterval, 5*time.Second)
	orDefault(&cfg.Retry.MaxElapsedTime, time.Minute)
	orDefault(&cfg.Retry.RandomizationFactor, 0.5)
	orDefault(&cfg.Timeout, 10*time.Second)
	orDefault(&cfg.ProgressInterval, 200*time.Millisecond)
	return cfg
}

// Copies is the exact number of copies among Records: round(Records *
// Duplicates).
func (cfg Config) Copies() int64 {
	if cfg.Duplicates <= 0 {
		return 0
	}
	return int64(math.Round(float64(cfg.Records) * cfg.Duplicates))
}

// Validate reports the first invalid setting, naming it by its dedupload
// flag and saying what it takes. It expects Defaults to have been applied.
func (cfg Config) Validate() error {
	r := cfg.Retry
	bad := func(x float64) bool { return math.IsNaN(x) || math.IsInf(x, 0) }
	for _, c := range []struct {
		invalid bool
		msg     string
	}{
		{cfg.Protocol != GRPC && cfg.Protocol != HTTP, fmt.Sprintf("protocol must be grpc or http, got %q", cfg.Protocol)},
		{cfg.Compression != "none" && cfg.Compression != "gzip", fmt.Sprintf("compression must be none or gzip, got %q", cfg.Compression)},
		{strings.TrimSpace(cfg.Endpoint) == "", "endpoint must not be empty"},
		{cfg.Records < 1, fmt.Sprintf("records must be >= 1, got %d", cfg.Records)},
		{bad(cfg.Duplicates) || cfg.Duplicates < 0 || cfg.Duplicates >= 1, fmt.Sprintf("duplicates must be in [0, 1) (a fraction of records), got %v", cfg.Duplicates)},
		{cfg.Copies() >= cfg.Records, fmt.Sprintf("duplicates %v of %d records leaves no original to copy: lower it", cfg.Duplicates, cfg.Records)},
		{cfg.Batch < 1, fmt.Sprintf("batch must be >= 1, got %d", cfg.Batch)},
		{cfg.Senders < 1, fmt.Sprintf("senders must be >= 1, got %d", cfg.Senders)},
		{bad(cfg.Rate) || cfg.Rate < 0, fmt.Sprintf("rate must be >= 0 records/s (0 = as fast as possible), got %v", cfg.Rate)},
		{cfg.Key != KeyContent && cfg.Key != KeyEventID, fmt.Sprintf("key must be content or event.id, got %q", cfg.Key)},
		{cfg.Timeout < 0, fmt.Sprintf("timeout must be > 0, got %v", cfg.Timeout)},
		{cfg.Duration < 0, fmt.Sprintf("duration must be >= 0 (0 = no cap), got %v", cfg.Duration)},
		{r.InitialInterval < 0, fmt.Sprintf("retry-initial must be > 0, got %v", r.InitialInterval)},
		{bad(r.Multiplier) || r.Multiplier < 1, fmt.Sprintf("retry-multiplier must be >= 1, got %v", r.Multiplier)},
		{r.MaxInterval < r.InitialInterval, fmt.Sprintf("retry-max-interval (%v) must be >= retry-initial (%v)", r.MaxInterval, r.InitialInterval)},
		{math.IsNaN(r.RandomizationFactor) || r.RandomizationFactor >= 1, fmt.Sprintf("retry randomization factor must be < 1, got %v", r.RandomizationFactor)},
	} {
		if c.invalid {
			return errors.New(c.msg)
		}
	}
	for k := range cfg.Headers {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return fmt.Errorf("headers: invalid header name %q", k)
		}
	}
	return nil
}

// ParseHeaders parses "k=v,k2=v2" (dedupload's -headers) into a map.
func ParseHeaders(s string) (map[string]string, error) {
	h := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return h, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		if k = strings.TrimSpace(k); !ok || k == "" {
			return nil, fmt.Errorf("headers: want k=v[,k=v...], got %q", kv)
		}
		h[k] = strings.TrimSpace(v)
	}
	return h, nil
}
