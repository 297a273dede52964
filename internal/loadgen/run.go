package loadgen

import (
	"context"
	"encoding/json"
	"math"
	"math/bits"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// Summary is what a run delivered. Its JSON form is dedupload's summary line.
type Summary struct {
	// Sent is the records acknowledged by the endpoint.
	Sent int64 `json:"sent"`
	// Unique is the distinct identities among the acknowledged records.
	Unique int64 `json:"unique"`
	// Duplicates is Sent - Unique: the acknowledged records a dedup must
	// drop. It is round(records*duplicates) when everything was
	// acknowledged.
	Duplicates int64 `json:"duplicates"`
	// Requests is the requests (batches) sent, each counted once however
	// often it was retried.
	Requests int64 `json:"requests"`
	// Retries is the re-sends: the endpoint saw Requests+Retries attempts.
	Retries int64 `json:"retries"`
	// Errors is the requests that finally failed: a non-retryable error,
	// retries exhausted or stopped, or a partial success.
	Errors int64 `json:"errors"`
	// FailedRecords is the records of those requests that were not
	// acknowledged.
	FailedRecords int64 `json:"failed_records"`
	// Seconds is the run's wall time.
	Seconds float64 `json:"seconds"`
	// RecordsPerSecond is Sent / Seconds.
	RecordsPerSecond float64 `json:"records_per_second"`
	// Seed is the generator's seed: the same seed, the same stream.
	Seed uint64 `json:"seed"`
	// Ground truth of the acknowledged copies, by where their original was
	// generated: the same request, an earlier request of the same sender,
	// a request of another sender. They add up to Duplicates when
	// everything was acknowledged.
	CopiesInBatch     int64 `json:"copies_in_batch"`
	CopiesSameSender  int64 `json:"copies_same_sender"`
	CopiesOtherSender int64 `json:"copies_other_sender"`
	// LatencyP50 and LatencyP99 are the median and 99th percentile of the
	// acknowledged requests' latencies, in seconds: from the first attempt
	// to the acknowledgement, retries included.
	LatencyP50 float64 `json:"latency_p50_seconds"`
	LatencyP99 float64 `json:"latency_p99_seconds"`
	// LastError is the last failed attempt's error, if any.
	LastError string `json:"last_error,omitempty"`
}

// JSON is the summary as one line of JSON (no newline).
func (s Summary) JSON() string {
	b, _ := json.Marshal(s)
	return string(b)
}

// Run sends cfg's stream and returns what was delivered. It returns an error
// only for an invalid configuration or an endpoint it cannot use, or, with
// the partial summary, ctx's error if ctx ended the run (requests in flight
// are then cut and counted as errors). Failed requests are counted in the
// summary, not returned.
func Run(ctx context.Context, cfg Config) (Summary, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return Summary{}, err
	}
	gen, err := NewGenerator(cfg)
	if err != nil {
		return Summary{}, err
	}
	var clients []*otlp.Client
	defer func() {
		for _, c := range clients {
			_ = c.Close()
		}
	}()
	for _, ep := range strings.Split(cfg.Endpoint, ",") {
		c, err := otlp.NewClient(cfg.Protocol, strings.TrimSpace(ep))
		if err != nil {
			return Summary{}, err
		}
		c.Gzip = cfg.Compression == "gzip"
		c.Header = http.Header{}
		for k, v := range cfg.Headers {
			c.Header.Set(k, v)
		}
		clients = append(clients, c)
	}

	r := &runner{
		cfg:     cfg,
		gen:     gen,
		clients: clients,
		ctx:     ctx,
		stop:    make(chan struct{}),
		seen:    make([]uint64, (gen.Uniques()+63)/64),
	}
	if cfg.Rate > 0 {
		r.pace = &pacer{per: float64(time.Second) / cfg.Rate}
	}

	start := time.Now()
	// stop closes on ctx's end, Duration, or cfg.Stop; done ends the watcher.
	done := make(chan struct{})
	var watch sync.WaitGroup
	watch.Go(func() {
		var timeout <-chan time.Time
		if cfg.Duration > 0 {
			t := time.NewTimer(cfg.Duration)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ctx.Done():
		case <-timeout:
		case <-cfg.Stop:
		case <-done:
			return
		}
		close(r.stop)
	})
	if cfg.Progress != nil {
		watch.Go(func() { r.progress(start, done) })
	}

	var senders sync.WaitGroup
	for s := range cfg.Senders {
		senders.Go(func() { r.sender(s) })
	}
	senders.Wait()
	elapsed := time.Since(start)
	close(done)
	watch.Wait()

	sum := r.summary(elapsed)
	return sum, ctx.Err()
}

type runner struct {
	cfg     Config
	gen     *Generator
	clients []*otlp.Client  // one per endpoint: each request goes to all
	ctx     context.Context // ends the run and cuts requests in flight
	stop    chan struct{}   // ends the run: no new request, no retry
	pace    *pacer

	seen []uint64 // bitset of acknowledged identities

	sent, requests, retries, errors, failed atomic.Int64
	inBatch, sameSender, otherSender        atomic.Int64
	lastErr                                 atomic.Pointer[string]

	latMu     sync.Mutex
	latencies []time.Duration // of acknowledged requests
}

// stopped reports whether the run was told to stop (the watcher closes
// r.stop for all three reasons; the other two are checked here too, so that
// a run told to stop before it started sends nothing).
func (r *runner) stopped() bool {
	select {
	case <-r.stop:
		return true
	case <-r.cfg.Stop:
		return true
	case <-r.ctx.Done():
		return true
	default:
		return false
	}
}

// sleep waits d, or less if the run stops; it reports whether it waited d.
func (r *runner) sleep(d time.Duration) bool {
	if d <= 0 {
		return !r.stopped()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.stop:
		return false
	}
}

// sender sends batches s, s+Senders, s+2*Senders, ... in order.
func (r *runner) sender(s int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(s)+1)) // backoff jitter
	for b := int64(s); b < r.gen.Batches(); b += int64(r.cfg.Senders) {
		if r.stopped() {
			return
		}
		if r.pace != nil && !r.sleep(time.Until(r.pace.reserve(r.gen.BatchLen(b)))) {
			return
		}
		r.send(r.gen.Batch(b), rng)
	}
}

// send delivers one batch, retrying like an exporter.
func (r *runner) send(b *Batch, rng *rand.Rand) {
	n := int64(len(b.Truth))
	r.requests.Add(1)
	first := time.Now()
	interval := r.cfg.Retry.InitialInterval
	for {
		actx, cancel := context.WithTimeout(r.ctx, r.cfg.Timeout)
		rejected, err := r.export(actx, b.Logs)
		cancel()
		if err == nil {
			r.ack(b, rejected, time.Since(first))
			return
		}
		retry, throttle := otlp.Retryable(err)
		if !retry || r.cfg.Retry.Disabled || r.ctx.Err() != nil {
			r.fail(n, err)
			return
		}
		delay := max(jitter(interval, r.cfg.Retry.RandomizationFactor, rng), throttle)
		interval = min(time.Duration(float64(interval)*r.cfg.Retry.Multiplier), r.cfg.Retry.MaxInterval)
		if limit := r.cfg.Retry.MaxElapsedTime; limit > 0 && time.Since(first)+delay > limit {
			r.fail(n, err)
			return
		}
		if !r.sleep(delay) {
			r.fail(n, err)
			return
		}
		r.retries.Add(1)
	}
}

// export sends a request to every endpoint at the same moment, so that
// copies race across a fleet: an attempt succeeds when every endpoint
// accepted it, and a retry goes to all of them again.
func (r *runner) export(ctx context.Context, ld plog.Logs) (int64, error) {
	rejected := make([]int64, len(r.clients))
	errs := make([]error, len(r.clients))
	var wg sync.WaitGroup
	for i, c := range r.clients {
		wg.Go(func() { rejected[i], errs[i] = c.ExportLogs(ctx, ld) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, err
		}
	}
	return slices.Max(rejected), nil
}

func jitter(d time.Duration, factor float64, rng *rand.Rand) time.Duration {
	if factor <= 0 {
		return d
	}
	delta := factor * float64(d)
	return time.Duration(float64(d) - delta + rng.Float64()*2*delta)
}

func (r *runner) ack(b *Batch, rejected int64, latency time.Duration) {
	r.latMu.Lock()
	r.latencies = append(r.latencies, latency)
	r.latMu.Unlock()
	n := int64(len(b.Truth))
	rejected = min(max(rejected, 0), n)
	for _, t := range b.Truth {
		atomic.OrUint64(&r.seen[t.ID>>6], 1<<(t.ID&63))
	}
	r.sent.Add(n - rejected)
	r.inBatch.Add(b.InBatch)
	r.sameSender.Add(b.SameSender)
	r.otherSender.Add(b.OtherSender)
	if rejected > 0 {
		// The response does not say which records were rejected: the
		// identities above count the whole batch as delivered.
		r.errors.Add(1)
		r.failed.Add(rejected)
		msg := "partial success: records rejected by the endpoint"
		r.lastErr.Store(&msg)
	}
}

func (r *runner) fail(n int64, err error) {
	r.errors.Add(1)
	r.failed.Add(n)
	msg := err.Error()
	r.lastErr.Store(&msg)
}

func (r *runner) unique() int64 {
	var u int
	for i := range r.seen {
		u += bits.OnesCount64(atomic.LoadUint64(&r.seen[i]))
	}
	return int64(u)
}

func (r *runner) summary(elapsed time.Duration) Summary {
	s := Summary{
		Sent:              r.sent.Load(),
		Unique:            r.unique(),
		Requests:          r.requests.Load(),
		Retries:           r.retries.Load(),
		Errors:            r.errors.Load(),
		FailedRecords:     r.failed.Load(),
		Seconds:           elapsed.Seconds(),
		Seed:              r.cfg.Seed,
		CopiesInBatch:     r.inBatch.Load(),
		CopiesSameSender:  r.sameSender.Load(),
		CopiesOtherSender: r.otherSender.Load(),
	}
	s.Duplicates = max(s.Sent-s.Unique, 0)
	if s.Seconds > 0 {
		s.RecordsPerSecond = float64(s.Sent) / s.Seconds
	}
	if p := r.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	r.latMu.Lock()
	defer r.latMu.Unlock()
	slices.Sort(r.latencies)
	s.LatencyP50 = percentile(r.latencies, 0.50).Seconds()
	s.LatencyP99 = percentile(r.latencies, 0.99).Seconds()
	return s
}

// percentile is the nearest-rank percentile q of sorted ds; 0 if empty.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
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
	now := time.Now()
	if p.next.Before(now) {
		p.next = now
	}
	at := p.next
	p.next = p.next.Add(time.Duration(float64(n) * p.per))
	return at
}
