// Package loadgen sends OTLP logs with an exact share of duplicates over
// OTLP/gRPC, retrying like an exporter, and reports what was acknowledged:
// the engine of dedupload (cmd/dedupload/README.md), of the benchmark
// driver and of end-to-end tests. The record stream is a pure function of
// the seed, records, duplicate share, batch size and senders: see Generator.
package loadgen

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

// Config is one load run. A zero field but Duplicates takes its default.
type Config struct {
	// Endpoint is host:port (127.0.0.1:4317). A comma-separated list sends
	// each request to every endpoint at once: copies racing across a fleet.
	Endpoint string
	Records  int64 // records to send in all (100000)
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

// RetryConfig is an exporter's retry_on_failure: a refused request is sent
// again, unchanged, after an exponential backoff (growing 1.5 times a retry,
// jittered by ±50%). Zero fields take the defaults.
type RetryConfig struct {
	InitialInterval time.Duration // the first backoff (100ms)
	MaxInterval     time.Duration // caps one backoff (5s)
	MaxElapsedTime  time.Duration // gives up this long after the first attempt (60s)
}

// attemptTimeout bounds one attempt; a timeout is retried.
const attemptTimeout = 10 * time.Second

func (cfg Config) withDefaults() Config {
	cfg.Endpoint = cmp.Or(cfg.Endpoint, "127.0.0.1:4317")
	cfg.Records = cmp.Or(cfg.Records, 100_000)
	cfg.Batch = cmp.Or(cfg.Batch, 1000)
	cfg.Senders = cmp.Or(cfg.Senders, 4)
	r := &cfg.Retry
	r.InitialInterval = cmp.Or(r.InitialInterval, 100*time.Millisecond)
	r.MaxInterval = cmp.Or(r.MaxInterval, 5*time.Second)
	r.MaxElapsedTime = cmp.Or(r.MaxElapsedTime, time.Minute)
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

// Run sends cfg's stream and returns what was delivered, failed requests
// counted. The error is an invalid configuration or endpoint, or, with the
// partial summary, ctx's if it ended the run (cutting requests in flight).
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
		c, err := otlp.NewClient(otlp.GRPC, strings.TrimSpace(ep))
		if err != nil {
			return Summary{}, err
		}
		r.clients = append(r.clients, c)
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

	mu        sync.Mutex
	nextSlot  time.Time       // of the next batch, with Rate
	latencies []time.Duration // of acknowledged requests

	seen []uint64 // bitset of acknowledged identities

	sent, requests, retries, errors, failed atomic.Int64
	lastErr                                 atomic.Value // string
}

// sleep waits d, or less if the run ends; it reports whether it waited d.
func (r *runner) sleep(d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.ctx.Done():
		return false
	}
}

// sender sends batches s, s+Senders, s+2*Senders, ... in order.
func (r *runner) sender(s int) {
	rng := rand.New(rand.NewPCG(r.cfg.Seed, uint64(s)+1)) // backoff jitter
	for b := int64(s); b < r.gen.Batches(); b += int64(r.cfg.Senders) {
		if r.ctx.Err() != nil || r.cfg.Rate > 0 && !r.sleep(r.slot(r.gen.BatchLen(b))) {
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
		again, throttle := retryable(err)
		delay := max(time.Duration(float64(interval)*(0.5+rng.Float64())), throttle)
		interval = min(interval*3/2, retry.MaxInterval)
		if !again || r.ctx.Err() != nil || time.Since(first)+delay > retry.MaxElapsedTime || !r.sleep(delay) {
			r.errors.Add(1)
			r.failed.Add(int64(len(b.Truth)))
			r.lastErr.Store(err.Error())
			return
		}
		r.retries.Add(1)
	}
}

// retryable reports whether an OTLP exporter sends a request again after
// err, and how long the server asked it to wait first (RetryInfo): the OTLP
// specification's retryable gRPC codes, with ResourceExhausted always
// retried, and a connection that failed or timed out.
func retryable(err error) (bool, time.Duration) {
	st, ok := status.FromError(err)
	if !ok {
		return true, 0
	}
	switch st.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.ResourceExhausted, codes.Aborted,
		codes.OutOfRange, codes.Unavailable, codes.DataLoss:
	default:
		return false, 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return true, ri.GetRetryDelay().AsDuration()
		}
	}
	return true, 0
}

// export sends a request to every endpoint at once, so that copies race
// across a fleet: an attempt succeeds when every endpoint accepted it.
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
	r.mu.Lock()
	r.latencies = append(r.latencies, latency)
	r.mu.Unlock()
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
	s.LastError, _ = r.lastErr.Load().(string)
	// Nearest-rank percentiles; 0 if nothing was acknowledged.
	slices.Sort(r.latencies)
	if n := len(r.latencies); n > 0 {
		at := func(q float64) float64 { return r.latencies[max(int(math.Ceil(q*float64(n)))-1, 0)].Seconds() }
		s.LatencyP50, s.LatencyP99 = at(0.50), at(0.99)
	}
	return s
}

// slot reserves the time of a batch of n records at Rate, after the batch
// before it, and returns the wait until then (no burst to catch up).
func (r *runner) slot(n int) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now := time.Now(); r.nextSlot.Before(now) {
		r.nextSlot = now
	}
	at := r.nextSlot
	r.nextSlot = at.Add(time.Duration(float64(n) * float64(time.Second) / r.cfg.Rate))
	return time.Until(at)
}

// Generator makes the record stream of a run. The stream is N positions cut
// into batches of Batch; batch b goes to sender b mod Senders. Exactly
// D = round(N*Duplicates) positions hold a copy, the others an original:
//
//   - the copies of batch b are floor(end*D/N) - floor(start*D/N) of its
//     positions (so every batch has its share, and the total is exact), which
//     ones chosen by a PRNG seeded with (seed, b); batch 0's first position is
//     always an original;
//   - originals are numbered in stream order: that number is the record's
//     identity (ID), and the record is a pure function of (seed, ID);
//   - a copy is byte-identical to an earlier original: one of the same batch
//     (about a quarter of copies, when the batch has one before it), one of
//     the batches just before (about half: the last 2*Senders batches, the
//     same sender's and the others'), or any earlier one.
//
// A batch is computed from its index alone, so nothing proportional to N is
// stored; Generator is safe for concurrent use.
type Generator struct {
	seed     uint64
	seedHash uint64
	n        uint64 // records
	d        uint64 // copies
	batch    uint64
	batches  uint64
	recent   uint64 // originals in the "recent" window
}

// startTime is the base of the records' timestamps: fixed, so that a seed
// alone decides the stream.
var startTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

// NewGenerator returns the generator of cfg's stream.
func NewGenerator(cfg Config) (*Generator, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	g := &Generator{
		seed:     cfg.Seed,
		seedHash: mix64(cfg.Seed + 0x9e3779b97f4a7c15),
		n:        uint64(cfg.Records),
		d:        uint64(cfg.copies()),
		batch:    uint64(cfg.Batch),
	}
	g.batches = (g.n + g.batch - 1) / g.batch
	g.recent = 2 * uint64(cfg.Senders) * g.batch
	return g, nil
}

// Uniques is how many distinct identities the stream holds.
func (g *Generator) Uniques() int64 { return int64(g.n - g.d) }

// Batches is how many requests the stream is cut into.
func (g *Generator) Batches() int64 { return int64(g.batches) }

// BatchLen is how many records batch b holds.
func (g *Generator) BatchLen(b int64) int {
	start := uint64(b) * g.batch
	return int(min(start+g.batch, g.n) - start)
}

// copiesBefore is floor(pos*D/N): the copies among positions [0, pos).
func (g *Generator) copiesBefore(pos uint64) uint64 {
	hi, lo := bits.Mul64(pos, g.d)
	q, _ := bits.Div64(hi, lo, g.n) // hi < n since pos <= n and d < n
	return q
}

// Truth is the ground truth of one record of a batch.
type Truth struct {
	// ID is its identity: records with the same ID are byte-identical.
	ID uint64
	// Copy tells a copy from an original (the first record with its ID).
	Copy bool
}

// Batch is one request's worth of the stream.
type Batch struct {
	Logs plog.Logs
	// Truth lists the records in stream order (Logs groups them by resource).
	Truth []Truth
}

// Batch computes batch b (0 <= b < Batches()).
func (g *Generator) Batch(b int64) *Batch {
	ub := uint64(b)
	start := ub * g.batch
	end := min(start+g.batch, g.n)
	n := int(end - start)
	cb := g.copiesBefore(start)
	need := int(g.copiesBefore(end) - cb) // copies among the batch's slots
	firstID := start - cb
	next := firstID

	rng := rand.New(rand.NewPCG(g.seed, ub^0x5851f42d4c957f2d))
	out := &Batch{Truth: make([]Truth, n)}
	for i := range n {
		t := &out.Truth[i]
		// Which slots are copies: selection sampling (Knuth's algorithm S),
		// exactly need of them, never batch 0's first.
		if b == 0 && i == 0 || need == 0 || rng.IntN(n-i) >= need {
			t.ID = next
			next++
			continue
		}
		need--
		t.Copy = true
		inBatch := next - firstID // originals of this batch before slot i
		switch r := rng.IntN(4); {
		case inBatch > 0 && (r == 0 || firstID == 0):
			t.ID = firstID + rng.Uint64N(inBatch)
		case r <= 2:
			from := firstID - min(firstID, g.recent)
			t.ID = from + rng.Uint64N(firstID-from)
		default:
			t.ID = rng.Uint64N(firstID)
		}
	}
	out.Logs = g.build(out.Truth)
	return out
}

// Resources: 8 services on 4 hosts each, like a fleet of SDKs.
const (
	numServices     = 8
	hostsPerService = 4
	numResources    = numServices * hostsPerService
	scopeName       = "github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload"
	scopeVersion    = "1.0.0"
)

var serviceNames = [numServices]string{"checkout", "cart", "payment", "frontend", "inventory", "auth", "shipping", "search"}

// build assembles the records of a batch, grouped by resource in order of
// first appearance.
func (g *Generator) build(truth []Truth) plog.Logs {
	ld := plog.NewLogs()
	rls := ld.ResourceLogs()
	var slices [numResources]plog.LogRecordSlice
	var have [numResources]bool
	for _, t := range truth {
		h := mix64(t.ID ^ g.seedHash)
		r := h % numResources
		if !have[r] {
			have[r] = true
			rl := rls.AppendEmpty()
			ra := rl.Resource().Attributes()
			ra.EnsureCapacity(3)
			ra.PutStr("service.name", serviceNames[r/hostsPerService])
			ra.PutStr("host.name", fmt.Sprintf("%s-%d", serviceNames[r/hostsPerService], r%hostsPerService))
			ra.PutStr("telemetry.sdk.language", "go")
			sl := rl.ScopeLogs().AppendEmpty()
			sl.Scope().SetName(scopeName)
			sl.Scope().SetVersion(scopeVersion)
			slices[r] = sl.LogRecords()
			slices[r].EnsureCapacity(len(truth)/numResources + 8)
		}
		g.fill(slices[r].AppendEmpty(), t.ID, h)
	}
	return ld
}

var bodies = [...]string{
	"GET /api/v1/orders/%d completed in %dms",
	"user %d logged in after %dms",
	"payment %d declined by issuer after %dms",
	"cache miss for session %d, refilled in %dms",
	"call to inventory for item %d timed out after %dms",
}

// fill writes the record with this identity.
func (g *Generator) fill(lr plog.LogRecord, id, h uint64) {
	h2 := mix64(h + 0x632be59bd9b4e019)
	ts := startTime + int64(id)*int64(100*time.Microsecond) + int64(h2%uint64(100*time.Microsecond))
	observed := ts + int64((h2>>24)%uint64(5*time.Millisecond))
	latency := 1 + (h2>>40)%2000
	lr.SetTimestamp(pcommon.Timestamp(ts))
	lr.SetObservedTimestamp(pcommon.Timestamp(observed))

	sev, text, status := plog.SeverityNumberDebug, "DEBUG", int64(200)
	switch p := (h >> 8) % 100; {
	case p < 4:
		sev, text, status = plog.SeverityNumberError, "ERROR", 500+int64((h>>16)%4)
	case p < 14:
		sev, text, status = plog.SeverityNumberWarn, "WARN", []int64{404, 409, 429}[(h>>16)%3]
	case p < 90:
		sev, text, status = plog.SeverityNumberInfo, "INFO", 200+int64((h>>16)%2)
	}
	lr.SetSeverityNumber(sev)
	lr.SetSeverityText(text)

	lr.Body().SetStr(fmt.Sprintf(bodies[(h>>32)%uint64(len(bodies))], (h>>20)%1_000_000, latency))
	attrs := lr.Attributes()
	attrs.EnsureCapacity(3)
	attrs.PutStr("event.id", g.EventID(id))
	attrs.PutInt("http.status_code", status)
	attrs.PutStr("user.id", "user-"+strconv.FormatUint((h>>44)%100_000, 10))

	if (h>>60)&1 == 0 { // half of the records belong to a trace
		var tid pcommon.TraceID
		var sid pcommon.SpanID
		binary.BigEndian.PutUint64(tid[:8], mix64(h^1))
		binary.BigEndian.PutUint64(tid[8:], mix64(h^2))
		binary.BigEndian.PutUint64(sid[:], mix64(h^3))
		lr.SetTraceID(tid)
		lr.SetSpanID(sid)
		lr.SetFlags(plog.DefaultLogRecordFlags.WithIsSampled(true))
	}
}

// EventID is the event.id attribute of the records with identity id: a
// UUID-shaped string whose low 64 bits are a bijection of id (mix64 is one),
// so that distinct identities never share an event.id.
func (g *Generator) EventID(id uint64) string {
	var raw [16]byte
	binary.BigEndian.PutUint64(raw[:8], mix64(g.seedHash^mix64(id))&^(0xf<<12)|0x4<<12) // version 4 nibble
	binary.BigEndian.PutUint64(raw[8:], mix64(id+g.seedHash))
	h := hex.EncodeToString(raw[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// mix64 is SplitMix64's finalizer: a bijection on uint64 that scatters bits.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
