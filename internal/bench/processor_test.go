package bench

import (
	"context"
	"encoding/json"
	"math"
	"slices"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/redistest"
)

func TestIsCopy(t *testing.T) {
	for _, pct := range []int{0, 10, 30, 50, 90} {
		for _, n := range []int64{100, 1000, 12345} {
			var copies int64
			for pos := range n {
				if IsCopy(pos, pct) {
					copies++
				}
			}
			if want := n * int64(pct) / 100; copies != want {
				t.Errorf("pct %d over %d records: %d copies, want %d", pct, n, copies, want)
			}
		}
		if IsCopy(0, pct) {
			t.Errorf("pct %d: the first record is a copy", pct)
		}
	}
}

// distinct counts the distinct bodies and event ids of the batches.
func distinct(batches []plog.Logs) (records, bodies, ids int) {
	b, e := map[string]bool{}, map[string]bool{}
	for _, ld := range batches {
		lrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
		for i := range lrs.Len() {
			records++
			b[lrs.At(i).Body().Str()] = true
			v, _ := lrs.At(i).Attributes().Get("event.id")
			e[v.Str()] = true
		}
	}
	return records, len(b), len(e)
}

func TestGenLogs(t *testing.T) {
	for _, c := range []struct{ nb, size, pct, unique int }{
		{4, 250, 30, 700},
		{10, 10, 90, 10},
		{2, 1000, 0, 2000},
		{64, 10, 50, 320},
	} {
		records, bodies, ids := distinct(GenLogs(c.nb, c.size, c.pct))
		if records != c.nb*c.size || bodies != c.unique || ids != c.unique {
			t.Errorf("GenLogs(%d, %d, %d): %d records, %d bodies, %d ids; want %d records, %d unique",
				c.nb, c.size, c.pct, records, bodies, ids, c.nb*c.size, c.unique)
		}
	}
}

func TestSweepPoints(t *testing.T) {
	// Every point processes whole passes over its batches: 64 batches
	// (200000/size, between 4 and 64) per pass, passes until Records.
	ctx := context.Background()
	var got []SweepPoint
	pts, err := Sweep(ctx, SweepConfig{Keys: []string{KeyContent, KeyEventID}, Batches: []int{10, 1000}, DupPcts: []int{0, 30}, Records: 15000, Trials: 3, Warm: 2000},
		func(p SweepPoint) { got = append(got, p) })
	if err != nil {
		t.Fatal(err)
	}
	if len(pts) != 8 || len(got) != 8 {
		t.Fatalf("%d points, %d reported; want 8", len(pts), len(got))
	}
	for i, p := range pts {
		// Each of 3 trials runs 5000 records at least: batch 10: 640
		// records per pass, 8 passes; batch 1000: one pass of 64000.
		want := map[int]int64{10: 5120, 1000: 64000}[p.Batch]
		if p.Records != want || p.Seconds <= 0 || len(p.TrialNs) != 3 || p.Key != got[i].Key || p.Seconds != got[i].Seconds {
			t.Errorf("point %+v: want %d records, a positive time, 3 trials", p, want)
		}
		// The point is the median trial.
		s := slices.Sorted(slices.Values(p.TrialNs))
		if math.Abs(p.NsPerRecord()-s[1]) > 1e-6 {
			t.Errorf("point %+v: %v ns/record is not the median trial", p, p.NsPerRecord())
		}
	}
	if pts[0].Key != KeyContent || pts[7].Key != KeyEventID || pts[3].Batch != 1000 || pts[3].DupPct != 30 {
		t.Errorf("order of points: %+v", pts)
	}
}

func TestReplayParallelDeliversAll(t *testing.T) {
	ctx := context.Background()
	sink := &CountingConsumer{}
	p, err := NewProcessor(ctx, ProcOptions{Key: KeyEventID, Next: sink})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(ctx)
	var passes Passes
	if _, err := ReplayParallel(p, 4, 3, 100, 10_000, &passes); err != nil {
		t.Fatal(err)
	}
	if sink.Records.Load() != 10_000 || sink.Batches.Load() != 100 {
		t.Fatalf("delivered %d records in %d batches, want 10000 in 100", sink.Records.Load(), sink.Batches.Load())
	}
}

func TestNewProcessorRejectsKey(t *testing.T) {
	if _, err := NewProcessor(context.Background(), ProcOptions{Key: "body"}); err == nil {
		t.Fatal("no error for an unknown key mode")
	}
}

func TestCountRoundTrips(t *testing.T) {
	srv := redistest.Standalone(t)
	s := &RedisServer{Addr: srv.Addr(), Port: srv.Port(), client: srv.Client()}
	trips, err := CountRoundTrips(context.Background(), s, 5, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(trips) != 5 {
		t.Fatalf("%d batches counted, want 5", len(trips))
	}
	for i, tc := range trips[1:] {
		if tc != (TripCount{Claim: 1, Commit: 1}) {
			t.Errorf("batch %d: %+v, want one claim and one commit round trip", i+1, tc)
		}
	}
	if trips[0].Claim < 1 || trips[0].Commit != 1 {
		t.Errorf("first batch: %+v", trips[0])
	}
}

func TestCollectorConfig(t *testing.T) {
	ports := e2e.Ports{OTLPGRPC: 1001, OTLPHTTP: 1002, Metrics: 1003, Health: 1004}
	type pipeline struct {
		Receivers, Processors, Exporters []string
	}
	type config struct {
		Receivers  map[string]map[string]map[string]map[string]string
		Processors map[string]map[string]map[string][]string
		Exporters  map[string]map[string]any
		Service    struct {
			Pipelines map[string]pipeline
		}
	}
	for _, c := range []struct {
		mode       string
		processors []string
		redis      []string
	}{
		{ModePassThrough, []string{}, nil},
		{ModeDedup, []string{"dedup"}, nil},
		{ModeDedupRedis, []string{"dedup"}, []string{"127.0.0.1:6390"}},
	} {
		js, err := CollectorConfig(c.mode, ports, "127.0.0.1:6390")
		if err != nil {
			t.Fatal(err)
		}
		var cfg config
		if err := json.Unmarshal(js, &cfg); err != nil {
			t.Fatalf("%s: %v\n%s", c.mode, err, js)
		}
		p := cfg.Service.Pipelines["logs"]
		if !slices.Equal(p.Receivers, []string{"otlp"}) || !slices.Equal(p.Exporters, []string{"nop"}) || !slices.Equal(p.Processors, c.processors) {
			t.Errorf("%s: pipeline %+v", c.mode, p)
		}
		if len(cfg.Service.Pipelines) != 1 || len(cfg.Exporters) != 1 || cfg.Exporters["nop"] == nil {
			t.Errorf("%s: pipelines %v exporters %v", c.mode, cfg.Service.Pipelines, cfg.Exporters)
		}
		if got := cfg.Receivers["otlp"]["protocols"]["grpc"]["endpoint"]; got != "127.0.0.1:1001" {
			t.Errorf("%s: grpc endpoint %q", c.mode, got)
		}
		if got := cfg.Processors["dedup"]["redis"]["endpoints"]; !slices.Equal(got, c.redis) {
			t.Errorf("%s: redis endpoints %v, want %v", c.mode, got, c.redis)
		}
	}
	if _, err := CollectorConfig("batch", ports, ""); err == nil {
		t.Error("unknown mode: no error")
	}
	if _, err := CollectorConfig(ModeDedupRedis, ports, ""); err == nil {
		t.Error("dedup+redis without an address: no error")
	}
}
