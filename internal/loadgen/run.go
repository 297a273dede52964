// Package loadgen sends OTLP logs with an exact share of duplicates to an
// OTLP/gRPC or OTLP/HTTP endpoint, retrying like an exporter, and reports
// what was acknowledged: the engine of dedupload (cmd/dedupload/README.md),
// of the benchmark driver's runs and of end-to-end tests. The record stream
// is a pure function of the seed, the records, the duplicate share, the
// batch size and the senders: see Generator.
package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// The protocols, otlp's.
const (
	GRPC = otlp.GRPC
	HTTP = otlp.HTTP
)

// Config is one load run. A zero field takes its default, except Duplicates
// (zero: none).
type Config struct {
	// Endpoint: see otlp.NewClient (default 127.0.0.1:4317 for gRPC,
	// 127.0.0.1:4318 for HTTP). A comma-separated list sends each request to
	// every endpoint at once: copies racing across a fleet.
	Endpoint string
	Protocol string // GRPC (default) or HTTP
	Records  int64  // records to send in all (100000)
	// Duplicates is the fraction of Records that are copies of records
	// generated earlier, in [0, 1): exactly round(Records*Duplicates) are.
	Duplicates float64
	Batch      int // records per request (1000)
	// Senders is how many requests are in flight at once (4): batch b is
	// sent by sender b mod Senders, in order.
	Senders int
	Rate    float64 // records per second over all senders; 0: as fast as possible; retries do not count
	Seed    uint64  // one seed, one stream
	Retry   RetryConfig
}

// RetryConfig is an exporter's retry_on_failure: a request refused with a
// retryable error is sent again, unchanged, after an exponential backoff
// (growing 1.5 times a retry, jittered by ±50%). Zero fields take the
// defaults.
type RetryConfig struct {
	InitialInterval time.Duration // the first backoff (100ms)
	MaxInterval     time.Duration // caps one backoff (5s)
	MaxElapsedTime  time.Duration // gives up this long after the first attempt (60s)
}

// attemptTimeout bounds one attempt; a timeout is retried.
const attemptTimeout = 10 * time.Second

func orDefault[T comparable](v *T, def T) {
	var zero T
	if *v == zero {
		*v = def
	}
}

func (cfg Config) withDefaults() Config {
	orDefault(&cfg.Protocol, GRPC)
	if cfg.Protocol == HTTP {
		orDefault(&cfg.Endpoint, "127.0.0.1:4318")
	}
	orDefault(&cfg.Endpoint, "127.0.0.1:4317")
	orDefault(&cfg.Records, 100_000)
	orDefault(&cfg.Batch, 1000)
	orDefault(&cfg.Senders, 4)
	orDefault(&cfg.Retry.InitialInterval, 100*time.Millisecond)
	orDefault(&cfg.Retry.MaxInterval, 5*time.Second)
	orDefault(&cfg.Retry.MaxElapsedTime, time.Minute)
	return cfg
}

// copies is the exact number of copies among Records.
func (cfg Config) copies() int64 {
	return int64(math.Round(float64(cfg.Records) * max(cfg.Duplicates, 0)))
}

// validate reports every invalid setting, naming it by its dedupload flag.
func (cfg Config) validate() error {
	var errs []error
	check := func(invalid bool, msg string) {
		if invalid {
			errs = append(errs, errors.New(msg))
		}
	}
	check(cfg.Protocol != GRPC && cfg.Protocol != HTTP, "protocol must be grpc or http, got "+cfg.Protocol)
	check(cfg.Records < 1, "records must be >= 1")
	check(!(cfg.Duplicates >= 0 && cfg.Duplicates < 1), "duplicates must be in [0, 1) (a fraction of records)")
	check(cfg.Records >= 1 && cfg.copies() >= cfg.Records, "duplicates leaves no original to copy: lower it")
	check(cfg.Batch < 1 || cfg.Senders < 1, "batch and senders must be >= 1")
	check(!(cfg.Rate >= 0), "rate must be >= 0 records/s (0 = as fast as possible)")
	check(cfg.Retry.MaxInterval < cfg.Retry.InitialInterval, "the longest backoff must be at least the first")
	return errors.Join(errs...)
}

// Summary is what a run delivered. Its JSON form is dedupload's output.
type Summary struct {
	Sent   int64 `json:"sent"`   // records acknowledged by the endpoint
	Unique int64 `json:"unique"` // distinct identities among them
	// Duplicates is Sent - Unique: the acknowledged records a dedup must
	// drop, round(records*duplicates) when everything was acknowledged.
	Duplicates int64 `json:"duplicates"`
	Requests   int64 `json:"requests"` // each counted once however often it was retried
	Retries    int64 `json:"retries"`  // re-sends: the endpoint saw Requests+Retries attempts
	// Errors is the requests that finally failed (a non-retryable error,
	// retries exhausted, the run cancelled), FailedRecords their records.
	Errors           int64   `json:"errors"`
	FailedRecords    int64   `json:"failed_records"`
	Seconds          float64 `json:"seconds"`
	RecordsPerSecond float64 `json:"records_per_second"` // Sent / Seconds
	Seed             uint64  `json:"seed"`
	// The median and 99th percentile of the acknowledged requests'
	// latencies, in seconds: from the first attempt to the acknowledgement.
	LatencyP50 float64 `json:"latency_p50_seconds"`
	LatencyP99 float64 `json:"latency_p99_seconds"`
	LastError  string  `json:"last_error,omitempty"`
}

// JSON is the summary as one line of JSON (no newline).
func (s Summary) JSON() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Run sends cfg's stream and returns what was delivered; failed requests
// are counted in it. The error is an invalid configuration or endpoint, or,
// with the partial summary, ctx's if ctx ended the run (requests in flight
// are then cut and counted as errors).
func Run(ctx context.Context, cfg Config) (Summary, error) {
	gen, err := NewGenerator(cfg)
	if err != nil {
		return Summary{}, err
	}
	cfg = cfg.withDefaults()
	r := &runner{cfg: cfg, gen: gen, ctx: ctx, seen: make([]uint64, (gen.Uniques()+63)/64)}
	defer func() {
		for _, c := range r.clients {
			_ = c.Close()
		}
	}()
	for _, ep := range strings.Split(cfg.Endpoint, ",") {
		c, err := otlp.NewClient(cfg.Protocol, strings.TrimSpace(ep))
		if err != nil {
			return Summary{}, err
		}
		r.clients = append(r.clients, c)
	}
	if cfg.Rate > 0 {
		r.pace = &pacer{per: float64(time.Second) / cfg.Rate}
	}
	start := time.Now()
	var senders sync.WaitGroup
	for s := range cfg.Senders {
		senders.Go(func() { r.sender(s) })
	}
	senders.Wait()
	return r.summary(time.Since(start)), ctx.Err()
}

type runner struct {
	cfg     Config
	gen     *Generator
	clients []*otlp.Client  // one per endpoint: each request goes to all
	ctx     context.Context // ends the run and cuts requests in flight
	pace    *pacer

	seen []uint64 // bitset of acknowledged identities

	sent, requests, retries, errors, failed atomic.Int64
	lastErr                                 atomic.Pointer[string]

	latMu     sync.Mutex
	latencies []time.Duration // of acknowledged requests
}

// sleep waits d, or less if the run ends; it reports whether it waited d.
func (r *runner) sleep(d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// sender sends batches s, s+Senders, s+2*Senders, ... in order.
func (r *runner) sender(s int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(s)+1)) // backoff jitter
	for b := int64(s); b < r.gen.Batches(); b += int64(r.cfg.Senders) {
		if r.ctx.Err() != nil || r.pace != nil && !r.sleep(time.Until(r.pace.reserve(r.gen.BatchLen(b)))) {
			return
		}
		r.send(r.gen.Batch(b), rng)
	}
}

// send delivers one batch, retrying like an exporter.
func (r *runner) send(b *Batch, rng *rand.Rand) {
	r.requests.Add(1)
	retry := r.cfg.Retry
	first, interval := time.Now(), retry.InitialInterval
	for {
		err := r.export(b)
		if err == nil {
			r.ack(b, time.Since(first))
			return
		}
		again, throttle := otlp.Retryable(err)
		delay := max(time.Duration(float64(interval)*(0.5+rng.Float64())), throttle)
		interval = min(interval*3/2, retry.MaxInterval)
		if !again || r.ctx.Err() != nil || time.Since(first)+delay > retry.MaxElapsedTime || !r.sleep(delay) {
			r.errors.Add(1)
			r.failed.Add(int64(len(b.Truth)))
			msg := err.Error()
			r.lastErr.Store(&msg)
			return
		}
		r.retries.Add(1)
	}
}

// export sends a request to every endpoint at the same moment, so that
// copies race across a fleet: an attempt succeeds when every endpoint
// accepted it, and a retry goes to all of them again.
func (r *runner) export(b *Batch) error {
	ctx, cancel := context.WithTimeout(r.ctx, attemptTimeout)
	defer cancel()
	errs := make([]error, len(r.clients))
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() { errs[i] = c.SendLogs(ctx, b.Logs) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (r *runner) ack(b *Batch, latency time.Duration) {
	r.latMu.Lock()
	r.latencies = append(r.latencies, latency)
	r.latMu.Unlock()
	for _, t := range b.Truth {
		atomic.OrUint64(&r.seen[t.ID>>6], 1<<(t.ID&63))
	}
	r.sent.Add(int64(len(b.Truth)))
}

func (r *runner) summary(elapsed time.Duration) Summary {
	s := Summary{Sent: r.sent.Load(), Requests: r.requests.Load(), Retries: r.retries.Load(), Errors: r.errors.Load(),
		FailedRecords: r.failed.Load(), Seconds: elapsed.Seconds(), Seed: r.cfg.Seed}
	for i := range r.seen {
		s.Unique += int64(bits.OnesCount64(atomic.LoadUint64(&r.seen[i])))
	}
	s.Duplicates = s.Sent - s.Unique
	if s.Seconds > 0 {
		s.RecordsPerSecond = float64(s.Sent) / s.Seconds
	}
	if p := r.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	// Nearest-rank percentiles; 0 if nothing was acknowledged.
	slices.Sort(r.latencies)
	if n := len(r.latencies); n > 0 {
		at := func(q float64) float64 { return r.latencies[max(int(math.Ceil(q*float64(n)))-1, 0)].Seconds() }
		s.LatencyP50, s.LatencyP99 = at(0.50), at(0.99)
	}
	return s
}

// pacer spreads records over time at a fixed rate for all senders: each
// batch reserves the slot after the previous one. A pacer that fell behind
// does not catch up in a burst.
type pacer struct {
	mu   sync.Mutex
	next time.Time
	per  float64 // nanoseconds per record
}

func (p *pacer) reserve(n int) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = at.Add(time.Duration(float64(n) * p.per))
	return at
}
