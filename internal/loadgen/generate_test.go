package loadgen

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
)

// uniquesBefore is the number of originals among positions [0, pos): the ID
// the next original gets.
func (g *Generator) uniquesBefore(pos uint64) uint64 { return pos - g.copiesBefore(pos) }

func mustGen(t testing.TB, cfg Config) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// checkStream walks the whole stream in order and checks the ground truth
// against the generation contract and the records themselves; it returns
// the copies by where their original is: the same batch, an earlier batch
// of the same sender, a batch of another sender.
func checkStream(t *testing.T, cfg Config) (inBatch, sameSender, otherSender int64) {
	t.Helper()
	g := mustGen(t, cfg)
	wantCopies := int64(math.Round(float64(cfg.Records) * cfg.Duplicates))
	batchOfID := map[uint64]int64{} // test-side memory: fine at test sizes
	var records, copies int64
	contentByID := map[uint64][32]byte{}
	contents := map[[32]byte]bool{}
	for b := range g.Batches() {
		bt := g.Batch(b)
		if len(bt.Truth) != g.BatchLen(b) || bt.Logs.LogRecordCount() != len(bt.Truth) {
			t.Fatalf("batch %d: %d truths, %d records, BatchLen %d", b, len(bt.Truth), bt.Logs.LogRecordCount(), g.BatchLen(b))
		}
		// Every batch has its share of the copies: floor(end*D/N) - floor(start*D/N).
		start, end := b*int64(cfg.Batch), b*int64(cfg.Batch)+int64(len(bt.Truth))
		wantBatchCopies := end*wantCopies/cfg.Records - start*wantCopies/cfg.Records
		var bc int64
		for _, tr := range bt.Truth {
			records++
			if !tr.Copy {
				if tr.ID != uint64(len(batchOfID)) {
					t.Fatalf("original at %d: ID %d, want %d", records-1, tr.ID, len(batchOfID))
				}
				batchOfID[tr.ID] = b
				continue
			}
			bc++
			from, ok := batchOfID[tr.ID]
			switch {
			case !ok:
				t.Fatalf("copy at %d refers to ID %d, not generated before it", records-1, tr.ID)
			case from == b:
				inBatch++
			case from%int64(cfg.Senders) == b%int64(cfg.Senders):
				sameSender++
			default:
				otherSender++
			}
		}
		if bc != wantBatchCopies {
			t.Fatalf("batch %d: %d copies, want %d", b, bc, wantBatchCopies)
		}
		copies += bc

		// The records: identities by event.id, copies byte-identical.
		idOf := map[string]uint64{}
		for _, tr := range bt.Truth {
			idOf[g.EventID(tr.ID)] = tr.ID
		}
		forEachRecord(bt.Logs, func(res, scope string, lr plog.LogRecord) {
			ev, ok := lr.Attributes().Get("event.id")
			if !ok {
				t.Fatal("record without event.id")
			}
			id, ok := idOf[ev.Str()]
			if !ok {
				t.Fatalf("event.id %q is no identity of batch %d", ev.Str(), b)
			}
			c := contentID(res, scope, lr)
			contents[c] = true
			if prev, ok := contentByID[id]; ok && prev != c {
				t.Fatalf("copies of ID %d differ", id)
			}
			contentByID[id] = c
		})
	}
	if records != cfg.Records || copies != wantCopies || int64(len(batchOfID)) != cfg.Records-wantCopies || g.Uniques() != cfg.Records-wantCopies {
		t.Fatalf("stream: %d records, %d copies, %d originals (Uniques %d); want %d, %d, %d",
			records, copies, len(batchOfID), g.Uniques(), cfg.Records, wantCopies, cfg.Records-wantCopies)
	}
	if int64(len(contents)) != cfg.Records-wantCopies {
		t.Fatalf("%d distinct contents, want one per identity: %d", len(contents), cfg.Records-wantCopies)
	}
	return inBatch, sameSender, otherSender
}

func forEachRecord(ld plog.Logs, f func(res, scope string, lr plog.LogRecord)) {
	rls := ld.ResourceLogs()
	for i := range rls.Len() {
		res := fmt.Sprint(rls.At(i).Resource().Attributes().AsRaw())
		sls := rls.At(i).ScopeLogs()
		for j := range sls.Len() {
			scope := sls.At(j).Scope().Name() + "@" + sls.At(j).Scope().Version()
			lrs := sls.At(j).LogRecords()
			for k := range lrs.Len() {
				f(res, scope, lrs.At(k))
			}
		}
	}
}

func TestGeneratorExact(t *testing.T) {
	cases := []Config{
		{Records: 1, Duplicates: 0, Batch: 1, Senders: 1},
		{Records: 2, Duplicates: 0.5, Batch: 1, Senders: 1},
		{Records: 2, Duplicates: 0.5, Batch: 2, Senders: 3},
		{Records: 10, Duplicates: 0.5, Batch: 3, Senders: 2},
		{Records: 1000, Duplicates: 0.3, Batch: 100, Senders: 4},
		{Records: 5000, Duplicates: 0.999, Batch: 7, Senders: 1},
		{Records: 4321, Duplicates: 0.77, Batch: 1000, Senders: 3},
		{Records: 777, Duplicates: 0.0001, Batch: 50, Senders: 5},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		n := 1 + rng.Int64N(3000)
		cases = append(cases, Config{
			Records: n, Duplicates: rng.Float64() * 0.95, Batch: 1 + rng.IntN(400),
			Senders: 1 + rng.IntN(6), Seed: rng.Uint64(),
		})
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("n=%d,dup=%.4f,batch=%d,senders=%d", c.Records, c.Duplicates, c.Batch, c.Senders), func(t *testing.T) {
			checkStream(t, c)
		})
	}
}

// The copies come from everywhere: the same request, the same sender's
// earlier requests, the other senders' requests, most of them from earlier
// requests.
func TestGeneratorCopySources(t *testing.T) {
	in, same, other := checkStream(t, Config{Records: 100_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
	t.Logf("copies: in batch %d, same sender %d, other senders %d", in, same, other)
	if in == 0 || same == 0 || other == 0 || in >= 15_000 {
		t.Fatalf("copy sources in %d same %d other %d: want all > 0 and most from earlier batches", in, same, other)
	}
}

func marshalBatch(t testing.TB, g *Generator, b int64) []byte {
	raw, err := plogotlp.NewExportRequestFromLogs(g.Batch(b).Logs).MarshalProto()
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

func TestGeneratorDeterministic(t *testing.T) {
	cfg := Config{Records: 5000, Duplicates: 0.4, Batch: 250, Senders: 3, Seed: 42}
	g1, g2 := mustGen(t, cfg), mustGen(t, cfg)
	cfg.Seed = 43
	g3 := mustGen(t, cfg)
	for b := range g1.Batches() {
		a, a2, c := marshalBatch(t, g1, b), marshalBatch(t, g2, b), marshalBatch(t, g3, b)
		if !bytes.Equal(a, a2) {
			t.Fatalf("batch %d: two generators with one seed differ", b)
		}
		if bytes.Equal(a, c) {
			t.Fatalf("batch %d: seeds 42 and 43 give the same batch", b)
		}
	}
}

// Ten million records need no memory proportional to N: any batch is
// computed from its index.
func TestGeneratorLarge(t *testing.T) {
	g := mustGen(t, Config{Records: 10_000_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
	if g.Batches() != 10_000 || g.Uniques() != 7_000_000 {
		t.Fatalf("batches %d uniques %d", g.Batches(), g.Uniques())
	}
	for _, b := range []int64{0, 1, 4_999, 9_999} {
		copies := 0
		for _, tr := range g.Batch(b).Truth {
			if tr.Copy {
				copies++
			}
			// An ID is below the originals generated up to this batch's end.
			if tr.ID >= g.uniquesBefore(uint64(b+1)*1000) {
				t.Fatalf("batch %d: truth %+v", b, tr)
			}
		}
		if copies != 300 {
			t.Fatalf("batch %d has %d copies, want 300", b, copies)
		}
	}
	if got := g.uniquesBefore(10_000_000); got != uint64(g.Uniques()) {
		t.Fatalf("uniquesBefore(N) = %d", got)
	}
}

func TestRecordsLookLikeAnSDKs(t *testing.T) {
	g := mustGen(t, Config{Records: 200, Duplicates: 0.3, Batch: 200, Senders: 1, Seed: 7})
	ld := g.Batch(0).Logs
	services := map[string]bool{}
	rls := ld.ResourceLogs()
	for i := range rls.Len() {
		ra := rls.At(i).Resource().Attributes()
		sn, ok1 := ra.Get("service.name")
		_, ok2 := ra.Get("host.name")
		if !ok1 || !ok2 {
			t.Fatalf("resource %v lacks service.name or host.name", ra.AsRaw())
		}
		services[sn.Str()] = true
		if s := rls.At(i).ScopeLogs().At(0).Scope(); s.Name() == "" || s.Version() == "" {
			t.Fatal("scope without name/version")
		}
	}
	if len(services) < 4 {
		t.Fatalf("only %d services", len(services))
	}
	withTrace := 0
	forEachRecord(ld, func(_, _ string, lr plog.LogRecord) {
		for _, k := range []string{"event.id", "http.status_code", "user.id"} {
			if _, ok := lr.Attributes().Get(k); !ok {
				t.Fatalf("record lacks attribute %s", k)
			}
		}
		if lr.Timestamp() == 0 || lr.ObservedTimestamp() < lr.Timestamp() || lr.SeverityNumber() == 0 ||
			lr.SeverityText() == "" || lr.Body().Str() == "" {
			t.Fatalf("record %v %v %v %q %q", lr.Timestamp(), lr.ObservedTimestamp(), lr.SeverityNumber(), lr.SeverityText(), lr.Body().Str())
		}
		if !lr.TraceID().IsEmpty() {
			withTrace++
		}
	})
	if withTrace == 0 || withTrace == 200 {
		t.Fatalf("%d of 200 records carry a trace context, want some", withTrace)
	}
}

func BenchmarkGenerateBatch(b *testing.B) {
	g := mustGen(b, Config{Records: 10_000_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
	b.ReportAllocs()
	i := int64(0)
	for b.Loop() {
		_, _ = plogotlp.NewExportRequestFromLogs(g.Batch(i % g.Batches()).Logs).MarshalProto()
		i++
	}
	b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "records/s")
}
