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

func mustGen(t testing.TB, cfg Config) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// checkStream walks the whole stream in order and checks the ground truth
// against the generation contract and the records themselves.
func checkStream(t *testing.T, cfg Config) {
	t.Helper()
	g := mustGen(t, cfg)
	wantCopies := int64(math.Round(float64(cfg.Records) * cfg.Duplicates))
	if g.Copies() != wantCopies {
		t.Fatalf("Copies() = %d, want %d", g.Copies(), wantCopies)
	}
	batchOfID := map[uint64]int64{} // test-side memory: fine at test sizes
	var pos, copies, inBatch, same, other int64
	contentByID := map[uint64][32]byte{}
	contents := map[[32]byte]bool{}
	for b := range g.Batches() {
		bt := g.Batch(b)
		if bt.Index != b || bt.Sender != int(b%int64(cfg.Senders)) {
			t.Fatalf("batch %d: index %d sender %d", b, bt.Index, bt.Sender)
		}
		if len(bt.Truth) != g.BatchLen(b) || bt.Logs.LogRecordCount() != len(bt.Truth) {
			t.Fatalf("batch %d: %d truths, %d records, BatchLen %d", b, len(bt.Truth), bt.Logs.LogRecordCount(), g.BatchLen(b))
		}
		var bc, bin, bsame, bother int64
		for _, tr := range bt.Truth {
			if tr.Position != pos {
				t.Fatalf("position %d, want %d", tr.Position, pos)
			}
			pos++
			if !tr.Copy {
				if tr.ID != uint64(len(batchOfID)) || tr.From != b {
					t.Fatalf("original at %d: ID %d From %d, want ID %d From %d", tr.Position, tr.ID, tr.From, len(batchOfID), b)
				}
				batchOfID[tr.ID] = b
				continue
			}
			bc++
			from, ok := batchOfID[tr.ID]
			if !ok {
				t.Fatalf("copy at %d refers to ID %d, not generated before it", tr.Position, tr.ID)
			}
			if from != tr.From {
				t.Fatalf("copy at %d: From %d, original is in batch %d", tr.Position, tr.From, from)
			}
			switch {
			case from == b:
				bin++
			case from%int64(cfg.Senders) == b%int64(cfg.Senders):
				bsame++
			default:
				bother++
			}
		}
		if bc != bt.Copies || bin != bt.InBatch || bsame != bt.SameSender || bother != bt.OtherSender {
			t.Fatalf("batch %d: counted copies %d/%d/%d/%d, batch says %d/%d/%d/%d",
				b, bc, bin, bsame, bother, bt.Copies, bt.InBatch, bt.SameSender, bt.OtherSender)
		}
		copies, inBatch, same, other = copies+bc, inBatch+bin, same+bsame, other+bother

		// The records: identities by event.id, content per key mode.
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
			if cfg.Key == KeyEventID && contents[c] {
				t.Fatalf("event.id mode: record content repeated (ID %d)", id)
			}
			contents[c] = true
			if prev, ok := contentByID[id]; ok && cfg.Key == KeyContent && prev != c {
				t.Fatalf("content mode: copies of ID %d differ", id)
			}
			if _, ok := contentByID[id]; !ok {
				contentByID[id] = c
			}
		})
	}
	if pos != cfg.Records || copies != wantCopies || int64(len(batchOfID)) != cfg.Records-wantCopies {
		t.Fatalf("stream: %d records, %d copies, %d originals; want %d, %d, %d",
			pos, copies, len(batchOfID), cfg.Records, wantCopies, cfg.Records-wantCopies)
	}
	if inBatch+same+other != copies {
		t.Fatalf("copy sources %d+%d+%d != %d", inBatch, same, other, copies)
	}
	wantContents := cfg.Records - wantCopies // content mode: one content per identity
	if cfg.Key == KeyEventID {
		wantContents = cfg.Records
	}
	if int64(len(contents)) != wantContents {
		t.Fatalf("%d distinct contents, want %d", len(contents), wantContents)
	}
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
		{Records: 1000, Duplicates: 0.3, Batch: 100, Senders: 4, Key: KeyEventID},
		{Records: 5000, Duplicates: 0.999, Batch: 7, Senders: 1},
		{Records: 4321, Duplicates: 0.77, Batch: 1000, Senders: 3, Key: KeyEventID},
		{Records: 777, Duplicates: 0.0001, Batch: 50, Senders: 5},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		n := 1 + rng.Int64N(3000)
		cases = append(cases, Config{
			Records: n, Duplicates: rng.Float64() * 0.95, Batch: 1 + rng.IntN(400),
			Senders: 1 + rng.IntN(6), Seed: rng.Uint64(),
			Key: []Key{KeyContent, KeyEventID}[rng.IntN(2)],
		})
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("n=%d,dup=%.4f,batch=%d,senders=%d,key=%s", c.Records, c.Duplicates, c.Batch, c.Senders, c.Key), func(t *testing.T) {
			checkStream(t, c)
		})
	}
}

// The copies come from everywhere the issue asks: the same request, the same
// sender's earlier requests, the other senders' requests, most of them
// from earlier requests.
func TestGeneratorCopySources(t *testing.T) {
	g := mustGen(t, Config{Records: 100_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
	var c, in, same, other int64
	for b := range g.Batches() {
		bt := g.Batch(b)
		c, in, same, other = c+bt.Copies, in+bt.InBatch, same+bt.SameSender, other+bt.OtherSender
	}
	t.Logf("copies %d: in batch %d, same sender %d, other senders %d", c, in, same, other)
	if c != 30_000 || in+same+other != c {
		t.Fatalf("copies %d (in %d same %d other %d), want 30000", c, in, same, other)
	}
	if in == 0 || same == 0 || other == 0 || in >= c/2 {
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
	for _, key := range []Key{KeyContent, KeyEventID} {
		cfg := Config{Records: 5000, Duplicates: 0.4, Batch: 250, Senders: 3, Seed: 42, Key: key}
		g1, g2 := mustGen(t, cfg), mustGen(t, cfg)
		cfg.Seed = 43
		g3 := mustGen(t, cfg)
		for b := range g1.Batches() {
			a, a2, c := marshalBatch(t, g1, b), marshalBatch(t, g2, b), marshalBatch(t, g3, b)
			if !bytes.Equal(a, a2) {
				t.Fatalf("key %s batch %d: two generators with one seed differ", key, b)
			}
			if bytes.Equal(a, c) {
				t.Fatalf("key %s batch %d: seeds 42 and 43 give the same batch", key, b)
			}
		}
	}
}

// Ten million records need no memory proportional to N: any batch is
// computed from its index.
func TestGeneratorLarge(t *testing.T) {
	g := mustGen(t, Config{Records: 10_000_000, Duplicates: 0.3, Batch: 1000, Senders: 4})
	if g.Batches() != 10_000 || g.Copies() != 3_000_000 || g.Uniques() != 7_000_000 {
		t.Fatalf("batches %d copies %d uniques %d", g.Batches(), g.Copies(), g.Uniques())
	}
	for _, b := range []int64{0, 1, 4_999, 9_999} {
		bt := g.Batch(b)
		if bt.Copies != 300 {
			t.Fatalf("batch %d has %d copies, want 300", b, bt.Copies)
		}
		for _, tr := range bt.Truth {
			if tr.ID >= uint64(g.Uniques()) || tr.From > b || g.batchOf(tr.ID) != tr.From {
				t.Fatalf("batch %d: truth %+v", b, tr)
			}
		}
	}
	if got := g.uniquesBefore(uint64(g.Records())); got != uint64(g.Uniques()) {
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
