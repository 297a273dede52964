package loadgen

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"strconv"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
)

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
// So nothing proportional to N is stored: a batch is computed from its index
// alone. Generator is safe for concurrent use.
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
	c := int(g.copiesBefore(end) - cb)
	firstID := start - cb

	rng := rand.New(rand.NewPCG(g.seed, ub^0x5851f42d4c957f2d))
	out := &Batch{Truth: make([]Truth, n)}

	// Which slots are copies: selection sampling (Knuth's algorithm S), an
	// exact count c among slots [lo, n).
	lo := 0
	if b == 0 {
		lo = 1
	}
	need := c
	next := firstID
	for i := range n {
		t := &out.Truth[i]
		isCopy := false
		if i >= lo && need > 0 && rng.IntN(n-i) < need {
			isCopy = true
			need--
		}
		if !isCopy {
			t.ID = next
			next++
			continue
		}
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

var (
	serviceNames = [numServices]string{"checkout", "cart", "payment", "frontend", "inventory", "auth", "shipping", "search"}
	hostNames    [numResources]string
)

func init() {
	for r := range numResources {
		hostNames[r] = fmt.Sprintf("%s-%d", serviceNames[r/hostsPerService], r%hostsPerService)
	}
}

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
			ra.PutStr("host.name", hostNames[r])
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
