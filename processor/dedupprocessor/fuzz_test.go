package dedupprocessor

// Fuzz tests of key derivation and config decoding. `go test` runs the
// seeds (f.Add below and testdata/fuzz/<FuzzName>/); `go test -fuzz
// FuzzKeyDerivation` (or FuzzConfig) explores further.

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// fuzzValue builds a pdata value from a byte program and returns the rest
// of the program. Every value type is reachable, nested up to depth 6;
// strings and bytes take arbitrary (also invalid UTF-8) bytes.
func fuzzValue(v pcommon.Value, prog []byte, depth int) []byte {
	if len(prog) == 0 {
		return nil // empty value
	}
	op, prog := prog[0], prog[1:]
	take := func(n int) []byte {
		n = min(n, len(prog))
		b := prog[:n]
		prog = prog[n:]
		return b
	}
	u64 := func() uint64 {
		var b [8]byte
		copy(b[:], take(8))
		return binary.BigEndian.Uint64(b[:])
	}
	count := func(limit int) int {
		if len(prog) == 0 {
			return 0
		}
		return int(take(1)[0]) % limit
	}
	switch op % 9 {
	case 0: // empty
	case 1:
		v.SetStr(string(take(count(40))))
	case 2:
		v.SetInt(int64(u64()))
	case 3:
		v.SetDouble(math.Float64frombits(u64()))
	case 4:
		v.SetBool(count(2) == 1)
	case 5:
		v.SetEmptyBytes().FromRaw(take(count(40)))
	case 6:
		if depth == 0 {
			v.SetStr("leaf")
			break
		}
		m := v.SetEmptyMap()
		for n := count(4); n > 0; n-- {
			k := string(take(count(8)))
			prog = fuzzValue(m.PutEmpty(k), prog, depth-1)
		}
	case 7:
		if depth == 0 {
			v.SetInt(0)
			break
		}
		s := v.SetEmptySlice()
		for n := count(4); n > 0; n-- {
			prog = fuzzValue(s.AppendEmpty(), prog, depth-1)
		}
	case 8:
		v.SetStr(string(rune(op)))
	}
	return prog
}

// fuzzCanon is the reference identity of a value, written independently of the
// identity encoder: two values are the same identity exactly when their
// fuzzCanon strings are equal. Types are kept apart, maps compare regardless of
// entry order, doubles by their bits with -0 == +0, and the empty value is
// absence.
func fuzzCanon(v pcommon.Value) string {
	switch v.Type() {
	case pcommon.ValueTypeEmpty:
		return "∅"
	case pcommon.ValueTypeStr:
		return "s" + strconv.Quote(v.Str())
	case pcommon.ValueTypeInt:
		return "i" + strconv.FormatInt(v.Int(), 10)
	case pcommon.ValueTypeDouble:
		d := v.Double()
		if d == 0 {
			d = 0
		}
		return "d" + strconv.FormatUint(math.Float64bits(d), 16)
	case pcommon.ValueTypeBool:
		return "b" + strconv.FormatBool(v.Bool())
	case pcommon.ValueTypeBytes:
		return "x" + hex.EncodeToString(v.Bytes().AsRaw())
	case pcommon.ValueTypeMap:
		var entries []string
		for k, e := range v.Map().All() {
			entries = append(entries, strconv.Quote(k)+"="+fuzzCanon(e))
		}
		sort.Strings(entries)
		return "m{" + strings.Join(entries, ",") + "}"
	case pcommon.ValueTypeSlice:
		var items []string
		for i := 0; i < v.Slice().Len(); i++ {
			items = append(items, fuzzCanon(v.Slice().At(i)))
		}
		return "l[" + strings.Join(items, ",") + "]"
	}
	panic("unknown value type " + v.Type().String())
}

// fuzzProc is one logs processor under fuzzing, what it delivered and
// what it had counted after the previous iteration.
type fuzzProc struct {
	name   string
	p      *logsProcessor
	sink   *consumertest.LogsSink
	reader *sdkmetric.ManualReader
	last   biCounts
}

// counts reads the processor's records counter, by outcome.
func (fp *fuzzProc) counts(t *testing.T) biCounts {
	h := &harness{t: t, reader: fp.reader, id: fuzzComponentID}
	return h.biCounts()
}

var fuzzComponentID = processortest.NewNopSettings(componentType).ID

func newFuzzProc(f *testing.F, name string, keys []string) *fuzzProc {
	cfg := defaultConfig()
	cfg.Logs.Key = keys
	cfg.MetadataKeys = []string{"fuzz-iteration"} // each iteration its own tenant
	cfg.Cache.MaxEntries = 4096
	if err := cfg.Validate(); err != nil {
		f.Fatal(err)
	}
	sink := new(consumertest.LogsSink)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	set := processortest.NewNopSettings(componentType)
	set.MeterProvider = mp
	p, err := NewFactory().CreateLogs(context.Background(), set, cfg, sink)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		_ = p.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	return &fuzzProc{name: name, p: p.(*logsProcessor), sink: sink, reader: reader}
}

func (fp *fuzzProc) digests() []digest.Digest {
	var out []digest.Digest
	fp.p.Cache().Range(fp.p.Rounds().Now(), func(d digest.Digest, _ int64) { out = append(out, d) })
	return out
}

// FuzzKeyDerivation sends records with random key values (every pdata type,
// nested, invalid UTF-8, NaN, ...) and random other fields through logs
// processors keyed on an attribute (fast path and OTTL) and on content:
//   - nothing panics;
//   - a byte-identical copy always collapses into its original;
//   - a record whose keyed value differs never collapses, one whose keyed
//     value is the same identity (fuzzCanon) always does;
//   - a record differing only outside the key collapses under the key and
//     not on content;
//   - an absent key value is missing_key and passes;
//   - the fast path and OTTL derive the very same digests.
func FuzzKeyDerivation(f *testing.F) {
	f.Add([]byte{1, 3, 'a', 'b', 'c'}, []byte{1, 3, 'a', 'b', 'd'}, "body", int64(9))
	f.Add([]byte{2, 0, 0, 0, 0, 0, 0, 0, 1}, []byte{1, 1, '1'}, "int vs string", int64(0))
	f.Add([]byte{6, 2, 1, 'a', 2, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'b', 1, 1, 'x'}, []byte{6, 2, 1, 'b', 1, 1, 'x', 1, 'a', 2, 0, 0, 0, 0, 0, 0, 0, 1}, "map order", int64(-1))
	f.Add([]byte{3, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1}, []byte{3, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1}, "NaN", int64(3))
	f.Add([]byte{3, 0x80, 0, 0, 0, 0, 0, 0, 0}, []byte{3}, "-0 and +0", int64(3))
	f.Add([]byte{}, []byte{0}, "absent and null", int64(1))
	f.Add([]byte{1, 2, 0xff, 0xfe}, []byte{5, 2, 0xff, 0xfe}, "\xff invalid utf-8 string vs bytes", int64(5))
	f.Add([]byte{7, 3, 7, 1, 1, 1, 'a', 0, 4, 1}, []byte{7, 3, 7, 1, 1, 1, 'a', 0, 4, 0}, "nested slices", int64(17))

	procs := []*fuzzProc{
		newFuzzProc(f, "fast", []string{`attributes["k"]`}),
		newFuzzProc(f, "ottl", []string{`attributes[ "k" ]`}),
		newFuzzProc(f, "content", nil),
	}
	var iteration atomic.Int64

	f.Fuzz(func(t *testing.T, prog1, prog2 []byte, body string, sev int64) {
		// A, a copy of A, C: A with another k, D: A with another body.
		a := plog.NewLogs()
		rl := a.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", body)
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		ra := lrs.AppendEmpty()
		ra.Body().SetStr(body)
		ra.SetSeverityNumber(plog.SeverityNumber(sev))
		// Odd, so never a whole millisecond: the observed timestamp, which
		// numbers the records below, stays out of their identities.
		ra.SetTimestamp(pcommon.Timestamp(uint64(sev)<<1 | 1))
		ra.Attributes().PutStr("other", body)
		v1 := ra.Attributes().PutEmpty("k")
		fuzzValue(v1, prog1, 6)
		ra.CopyTo(lrs.AppendEmpty())
		rc := lrs.AppendEmpty()
		ra.CopyTo(rc)
		v2 := rc.Attributes().PutEmpty("k")
		fuzzValue(v2, prog2, 6)
		rd := lrs.AppendEmpty()
		ra.CopyTo(rd)
		rd.Body().SetStr(body + "!")
		for i := 0; i < lrs.Len(); i++ {
			lrs.At(i).SetObservedTimestamp(pcommon.Timestamp(i + 1))
		}

		c1, c2 := fuzzCanon(v1), fuzzCanon(v2)
		same := c1 == c2
		empty1, empty2 := v1.Type() == pcommon.ValueTypeEmpty, v2.Type() == pcommon.ValueTypeEmpty

		// Expected per processor: records delivered of A, A', C, D, and the
		// counts unique, duplicate, missing_key.
		type want struct {
			delivered            [4]bool
			unique, dup, missing int64
		}
		var keyed want
		switch {
		case empty1 && empty2:
			keyed = want{[4]bool{true, true, true, true}, 0, 0, 4}
		case empty1:
			keyed = want{[4]bool{true, true, true, true}, 1, 0, 3}
		case empty2:
			keyed = want{[4]bool{true, false, true, false}, 1, 2, 1}
		case same:
			keyed = want{[4]bool{true, false, false, false}, 1, 3, 0}
		default:
			keyed = want{[4]bool{true, false, true, false}, 2, 2, 0}
		}
		content := want{[4]bool{true, false, !same, true}, 2, 1, 0}
		if !same {
			content.unique = 3
		} else {
			content.dup = 2
		}

		ctx := client.NewContext(context.Background(), client.Info{
			Metadata: client.NewMetadata(map[string][]string{"fuzz-iteration": {strconv.FormatInt(iteration.Add(1), 10)}}),
		})
		for _, fp := range procs {
			w := keyed
			if fp.name == "content" {
				w = content
			}
			ld := plog.NewLogs()
			a.CopyTo(ld)
			fp.sink.Reset()
			if err := fp.p.ConsumeLogs(ctx, ld); err != nil {
				t.Fatalf("%s: %v", fp.name, err)
			}
			// Which records arrived, by their observed timestamps (1-4),
			// which no identity covers.
			var got [4]bool
			if all := fp.sink.AllLogs(); len(all) > 0 {
				out := all[0].ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
				for j := 0; j < out.Len(); j++ {
					got[out.At(j).ObservedTimestamp()-1] = true
				}
			}
			if got != w.delivered {
				t.Fatalf("%s: delivered %v, want %v (k1=%s k2=%s)", fp.name, got, w.delivered, c1, c2)
			}
			counts := fp.counts(t)
			if d := (want{w.delivered, counts.unique - fp.last.unique, counts.duplicate - fp.last.duplicate, counts.missing - fp.last.missing}); d != w {
				t.Fatalf("%s: counted unique %d, duplicate %d, missing_key %d; want %d %d %d (k1=%s k2=%s)",
					fp.name, d.unique, d.dup, d.missing, w.unique, w.dup, w.missing, c1, c2)
			}
			fp.last = counts
		}
		if f, o := procs[0].digests(), procs[1].digests(); !slices.Equal(f, o) {
			t.Fatalf("fast path and OTTL derived different digests for k1=%s k2=%s", c1, c2)
		}
	})
}

// FuzzConfig decodes random YAML as a dedup config the way the collector
// does and validates it: nothing panics, and a config that validates always
// builds a processor of every signal (Validate catches everything the
// factory would refuse).
func FuzzConfig(f *testing.F) {
	for _, seed := range []string{
		"",
		"window: 5m\naction: mark\nmark_attribute: seen",
		"window: 0s",
		"window: 5",
		"cache: {max_entries: 0}",
		"cache: 7",
		"storage: file_storage/x\nsnapshot_interval: -1s",
		"on_missing_key: content\nlogs: {key: ['attributes[\"id\"]', 'Unix(Int(time_unix_nano / 1000000000))']}",
		"logs: {key: ['attributes[\"id\"'], conditions: ['severity_number >>> 3']}",
		"logs: {ignore: ['attributes[\"a\"]', body, resource]}",
		"traces: {key: [], ignore: [events, links, 'resource.attributes[\"r\"]']}",
		"metrics: {key: [metric.name, 'attributes[\"x\"]'], conditions: ['metric.type == METRIC_DATA_TYPE_SUM']}",
		"metadata_keys: [X-Scope-OrgID, '']",
		"redis: {endpoints: ['127.0.0.1:6379'], password: secret, tls: {insecure: true}, lease: 1m, timeout: 10ms, on_error: refuse}",
		"redis: {endpoints: [a, 'b:', ':1'], master_name: m, db: -3}",
		"redis:",
		"redis: []",
		"logs: {key: [null, 1, {a: b}]}",
		"logs: {key: 'body[\"a\"][0]'}",
		"traces: {key: ['Hex(span_id)', 'SHA256(name)']}",
		"source: {key: ['resource.attributes[\"k8s.pod.name\"]', auth.subject, metadata.tenant, client.address], max_sources: 1000, log_interval: 0s}",
		"source: {key: [host.name, 'attributes[\"x\"]', 'auth.', ''], max_sources: 0, log_interval: 5}",
		"source: {key: []}",
		"unknown: {deeply: {nested: [1, 2]}}",
		"&a [*a]",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, yaml string) {
		r, err := confmap.NewRetrievedFromYAML([]byte(yaml))
		if err != nil {
			return
		}
		cm, err := r.AsConf()
		if err != nil {
			return
		}
		cfg := defaultConfig()
		if err := cm.Unmarshal(cfg); err != nil {
			return
		}
		if err := confmap.Validate(cfg); err != nil {
			if strings.TrimSpace(err.Error()) == "" {
				t.Fatal("an invalid config with an empty error message")
			}
			return
		}
		ctx := context.Background()
		set := processortest.NewNopSettings(componentType)
		lp, err := NewFactory().CreateLogs(ctx, set, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatalf("valid config, logs processor refused: %v\n%s", err, yaml)
		}
		tp, err := NewFactory().CreateTraces(ctx, set, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatalf("valid config, traces processor refused: %v\n%s", err, yaml)
		}
		mp, err := NewFactory().CreateMetrics(ctx, set, cfg, consumertest.NewNop())
		if err != nil {
			t.Fatalf("valid config, metrics processor refused: %v\n%s", err, yaml)
		}
		for _, p := range []interface{ Shutdown(context.Context) error }{lp, tp, mp} {
			if err := p.Shutdown(ctx); err != nil {
				t.Fatal(fmt.Errorf("shutdown without start: %w", err))
			}
		}
	})
}
