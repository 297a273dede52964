// Package loadgen sends OTLP logs with a known share of duplicates to an
// OTLP/gRPC or OTLP/HTTP endpoint, the way SDKs and exporters do, and reports
// what was acknowledged. It is the engine of cmd/dedupload and is meant to be
// called in-process by end-to-end tests and benchmarks:
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
)

// Protocols.
const (
	GRPC = "grpc"
	HTTP = "http"
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

// Default values (the ones an OTLP exporter's retry_on_failure uses, save the
// 60 s elapsed cap that keeps a load run bounded).
const (
	DefaultRecords         = 100_000
	DefaultBatch           = 1000
	DefaultSenders         = 4
	DefaultTimeout         = 10 * time.Second
	DefaultInitialInterval = 100 * time.Millisecond
	DefaultMultiplier      = 1.5
	DefaultMaxInterval     = 5 * time.Second
	DefaultMaxElapsed      = 60 * time.Second
	DefaultRandomization   = 0.5
	DefaultProgressEvery   = 200 * time.Millisecond
)

// DefaultStartTime is the base of the generated timestamps when Config has
// none: fixed, so that a seed alone decides the stream.
var DefaultStartTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// RetryConfig is an exporter's retry_on_failure: a request that failed with a
// retryable error is sent again, unchanged, after an exponential backoff.
type RetryConfig struct {
	// Disabled turns retries off: a failed request is counted and dropped.
	Disabled bool
	// InitialInterval is the first backoff (default 100ms).
	InitialInterval time.Duration
	// Multiplier grows the backoff after each retry (default 1.5).
	Multiplier float64
	// MaxInterval caps one backoff (default 5s).
	MaxInterval time.Duration
	// MaxElapsedTime gives up on a request this long after its first
	// attempt (default 60s); negative means never give up.
	MaxElapsedTime time.Duration
	// RandomizationFactor jitters each backoff by ±factor (default 0.5, as
	// the collector does); negative means no jitter.
	RandomizationFactor float64
}

// Config is one load run.
type Config struct {
	// Endpoint: host:port for gRPC (an http:// or https:// prefix picks
	// plaintext or TLS); host:port or a URL for HTTP, to which /v1/logs is
	// appended when it has no path. Empty: 127.0.0.1:4317 (gRPC) or
	// 127.0.0.1:4318 (HTTP). A comma-separated list sends each request to
	// every endpoint at once: copies racing across a fleet.
	Endpoint string
	// Protocol is GRPC (default) or HTTP (OTLP/HTTP protobuf).
	Protocol string
	// Compression is "none" (default) or "gzip".
	Compression string
	// Headers are sent with every request (gRPC metadata, HTTP headers),
	// e.g. X-Scope-OrgID for a multi-tenant pipeline.
	Headers map[string]string

	// Records is how many records to send in all (default 100000).
	Records int64
	// Duplicates is the fraction of Records that are copies of records
	// generated earlier, in [0, 1): exactly round(Records*Duplicates) are.
	// Zero means none (dedupload's flag defaults to 0.3).
	Duplicates float64
	// Batch is the records per request (default 1000).
	Batch int
	// Senders is how many requests are in flight at once (default 4).
	// Batch b is sent by sender b mod Senders, in order.
	Senders int
	// Rate caps records per second over all senders; 0 means as fast as
	// possible. Retries do not count against it.
	Rate float64
	// Key is what copies share with their original (default KeyContent).
	Key Key
	// Seed makes the stream: one seed, one stream.
	Seed uint64
	// StartTime is the base of the records' timestamps (default
	// DefaultStartTime).
	StartTime time.Time

	// Retry is the exporter-like retry behaviour.
	Retry RetryConfig
	// Timeout bounds one request attempt (default 10s).
	Timeout time.Duration
	// Duration, if > 0, stops the run after this long: no new request
	// starts, no request is retried, requests in flight finish.
	Duration time.Duration
	// Stop, if not nil, stops the run like Duration when it is closed.
	Stop <-chan struct{}

	// Progress, if not nil, receives a progress bar redrawn in place (with
	// carriage returns) every ProgressInterval (default 200ms), erased at the
	// end. Meant for a terminal.
	Progress         io.Writer
	ProgressInterval time.Duration
}

// Defaults returns cfg with every unset (zero) field set to its default.
// Run calls it.
func (cfg Config) Defaults() Config {
	if cfg.Protocol == "" {
		cfg.Protocol = GRPC
	}
	if cfg.Endpoint == "" {
		if cfg.Protocol == HTTP {
			cfg.Endpoint = "127.0.0.1:4318"
		} else {
			cfg.Endpoint = "127.0.0.1:4317"
		}
	}
	if cfg.Compression == "" {
		cfg.Compression = "none"
	}
	if cfg.Records == 0 {
		cfg.Records = DefaultRecords
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Senders == 0 {
		cfg.Senders = DefaultSenders
	}
	if cfg.Key == "" {
		cfg.Key = KeyContent
	}
	if cfg.StartTime.IsZero() {
		cfg.StartTime = DefaultStartTime
	}
	if cfg.Retry.InitialInterval == 0 {
		cfg.Retry.InitialInterval = DefaultInitialInterval
	}
	if cfg.Retry.Multiplier == 0 {
		cfg.Retry.Multiplier = DefaultMultiplier
	}
	if cfg.Retry.MaxInterval == 0 {
		cfg.Retry.MaxInterval = DefaultMaxInterval
	}
	if cfg.Retry.MaxElapsedTime == 0 {
		cfg.Retry.MaxElapsedTime = DefaultMaxElapsed
	}
	if cfg.Retry.RandomizationFactor == 0 {
		cfg.Retry.RandomizationFactor = DefaultRandomization
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ProgressInterval == 0 {
		cfg.ProgressInterval = DefaultProgressEvery
	}
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

// Validate reports the first invalid setting, naming it (by its dedupload
// flag) and what it takes. It expects Defaults to have been applied.
func (cfg Config) Validate() error {
	switch cfg.Protocol {
	case GRPC, HTTP:
	default:
		return fmt.Errorf("protocol must be grpc or http, got %q", cfg.Protocol)
	}
	switch cfg.Compression {
	case "none", "gzip":
	default:
		return fmt.Errorf("compression must be none or gzip, got %q", cfg.Compression)
	}
	if strings.TrimSpace(cfg.Endpoint) == "" {
		return errors.New("endpoint must not be empty")
	}
	if cfg.Records < 1 {
		return fmt.Errorf("records must be >= 1, got %d", cfg.Records)
	}
	if math.IsNaN(cfg.Duplicates) || cfg.Duplicates < 0 || cfg.Duplicates >= 1 {
		return fmt.Errorf("duplicates must be in [0, 1) (a fraction of records), got %v", cfg.Duplicates)
	}
	if c := cfg.Copies(); c >= cfg.Records {
		return fmt.Errorf("duplicates %v of %d records leaves no original to copy: lower it", cfg.Duplicates, cfg.Records)
	}
	if cfg.Batch < 1 {
		return fmt.Errorf("batch must be >= 1, got %d", cfg.Batch)
	}
	if cfg.Senders < 1 {
		return fmt.Errorf("senders must be >= 1, got %d", cfg.Senders)
	}
	if math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0) || cfg.Rate < 0 {
		return fmt.Errorf("rate must be >= 0 records/s (0 = as fast as possible), got %v", cfg.Rate)
	}
	switch cfg.Key {
	case KeyContent, KeyEventID:
	default:
		return fmt.Errorf("key must be content or event.id, got %q", cfg.Key)
	}
	if cfg.Timeout < 0 {
		return fmt.Errorf("timeout must be > 0, got %v", cfg.Timeout)
	}
	if cfg.Duration < 0 {
		return fmt.Errorf("duration must be >= 0 (0 = no cap), got %v", cfg.Duration)
	}
	r := cfg.Retry
	if r.InitialInterval < 0 {
		return fmt.Errorf("retry-initial must be > 0, got %v", r.InitialInterval)
	}
	if r.Multiplier < 1 || math.IsNaN(r.Multiplier) || math.IsInf(r.Multiplier, 0) {
		return fmt.Errorf("retry-multiplier must be >= 1, got %v", r.Multiplier)
	}
	if r.MaxInterval < r.InitialInterval {
		return fmt.Errorf("retry-max-interval (%v) must be >= retry-initial (%v)", r.MaxInterval, r.InitialInterval)
	}
	if r.RandomizationFactor >= 1 || math.IsNaN(r.RandomizationFactor) {
		return fmt.Errorf("retry randomization factor must be < 1, got %v", r.RandomizationFactor)
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
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return nil, fmt.Errorf("headers: want k=v[,k=v...], got %q", kv)
		}
		h[k] = strings.TrimSpace(v)
	}
	return h, nil
}
