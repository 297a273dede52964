package bench

import (
	"context"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
)

func TestFleetCollectorConfig(t *testing.T) {
	ports := e2e.Ports{OTLPGRPC: 1001, OTLPHTTP: 1002, Metrics: 1003, Health: 1004}
	type config struct {
		Receivers struct {
			OTLP struct {
				Protocols struct {
					GRPC struct {
						Endpoint string
						MaxRecv  int `json:"max_recv_msg_size_mib"`
					}
				}
			}
		}
		Processors struct {
			Dedup struct {
				Logs  struct{ Key []string }
				Redis struct {
					Endpoints []string
					Timeout   string
					OnError   string `json:"on_error"`
				}
			}
		}
		Exporters map[string]map[string]any
		Service   struct {
			Pipelines map[string]struct{ Receivers, Processors, Exporters []string }
		}
	}
	for _, c := range []struct {
		fc       FleetConfig
		key      []string
		exporter string
	}{
		{FleetConfig{Key: KeyEventID, Redis: []string{"127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"}}, []string{`attributes["event.id"]`}, "nop"},
		{FleetConfig{Key: KeyContent, Redis: []string{"127.0.0.1:6390"}, Sink: "127.0.0.1:4999"}, nil, sinkExporter},
	} {
		js, err := fleetCollectorConfig(ports, c.fc)
		if err != nil {
			t.Fatal(err)
		}
		var cfg config
		if err := json.Unmarshal(js, &cfg); err != nil {
			t.Fatal(err)
		}
		g := cfg.Receivers.OTLP.Protocols.GRPC
		d := cfg.Processors.Dedup
		p := cfg.Service.Pipelines["logs"]
		if g.Endpoint != "127.0.0.1:1001" || g.MaxRecv != 64 || !slices.Equal(d.Logs.Key, c.key) || !slices.Equal(d.Redis.Endpoints, c.fc.Redis) ||
			d.Redis.OnError != "refuse" || d.Redis.Timeout != "2s" || len(cfg.Exporters) != 1 || cfg.Exporters[c.exporter] == nil ||
			!slices.Equal(p.Processors, []string{"dedup"}) || !slices.Equal(p.Exporters, []string{c.exporter}) {
			t.Errorf("%+v:\n%s", c.fc, js)
		}
		if c.fc.Sink != "" && (cfg.Exporters[sinkExporter]["endpoint"] != c.fc.Sink ||
			cfg.Exporters[sinkExporter]["sending_queue"].(map[string]any)["enabled"] != false) {
			t.Errorf("sink exporter %v", cfg.Exporters[sinkExporter])
		}
	}
	if _, err := fleetCollectorConfig(ports, FleetConfig{Key: KeyEventID}); err == nil {
		t.Error("no Redis: no error")
	}
	if _, err := fleetCollectorConfig(ports, FleetConfig{Key: "body", Redis: []string{"x:1"}}); err == nil {
		t.Error("unknown key: no error")
	}
}

// TestStartCluster: a 3-master Cluster the driver starts serves keys on
// every master, its INFO counts add up over the masters, and FlushAll
// empties it.
func TestStartCluster(t *testing.T) {
	ctx := context.Background()
	d, err := StartCluster(ctx, "redis-server", "redis-cli", 3)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	if d.Topology != TopologyCluster || len(d.Endpoints()) != 3 || len(slices.Compact(slices.Sorted(slices.Values(d.PIDs())))) != 3 {
		t.Fatalf("%s: endpoints %v, pids %v", d.Topology, d.Endpoints(), d.PIDs())
	}
	// 12 tags, each set on the master that owns its slot.
	for i := range 12 {
		tag := string(rune('a' + i))
		key := "dedup:00000000:{" + tag + "}x"
		for _, n := range d.Nodes {
			if err := n.client.Set(ctx, key, "v", time.Minute).Err(); err == nil {
				break
			} else if !strings.HasPrefix(err.Error(), "MOVED") {
				t.Fatal(err)
			}
		}
	}
	sum, per, err := d.Counts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Keys != 12 || len(per) != 3 || per[0].Keys+per[1].Keys+per[2].Keys != 12 {
		t.Errorf("keys: %d in all, per node %d %d %d", sum.Keys, per[0].Keys, per[1].Keys, per[2].Keys)
	}
	for i, c := range per {
		if c.Keys == 0 {
			t.Errorf("master %d holds no key", i)
		}
	}
	tags, err := d.HashTags(ctx)
	if err != nil || len(tags) != 12 || tags["a"] != 1 {
		t.Errorf("hash tags %v, %v", tags, err)
	}
	if err := d.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if sum, _, err := d.Counts(ctx); err != nil || sum.Keys != 0 {
		t.Errorf("after FlushAll: %d keys, %v", sum.Keys, err)
	}
}

// TestFleetRuns runs each fleet measurement briefly with the binary: two
// collectors on one redis-server let each record through exactly once,
// whether copies race (each round's request to both at once), come from a
// loadgen stream, or meet their original's batch in flight.
func TestFleetRuns(t *testing.T) {
	bin, err := e2e.Distribution(os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := StartStandalone("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Stop()
	// Exports long enough that a copy sent 5 ms after its original meets
	// the original's batch in flight even on a busy machine.
	sink, err := NewDelaySink(100 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	f, err := StartFleet(ctx, bin, t.TempDir(), "fleet", 2, FleetConfig{Key: KeyEventID, Redis: d.Endpoints(), Sink: sink.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.Stop(); err != nil {
			t.Error(err)
		}
	}()

	r, err := RunRace(ctx, f, d, RaceConfig{Size: 100, Rounds: 5, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	// A standalone server claims a request's 100 keys in one script call, so
	// each round one collector wins them all and delivers, and the other
	// drops them all as held in Redis.
	if !r.Exact() || r.Refused != 0 || r.Records != 500 || len(r.RoundSeconds) != 5 || r.Batches() != 10 ||
		r.Counts.ByTier["redis"] != 500 || r.Counts.Op("claim") != 10 || r.Counts.RedisRequests["commit/ok"] != 5 || r.Counts.Failed() != 0 {
		t.Errorf("race: %+v", r)
	}
	if r.CPU.Collectors <= 0 || r.CPU.Redis <= 0 || r.Redis.NetBytes <= 0 || r.Redis.Keys < 500 {
		t.Errorf("race readings: CPU %+v, Redis %+v", r.CPU, r.Redis)
	}

	s, err := RunScale(ctx, f, d, ScaleConfig{Records: 3000, Duplicates: 0.3, Batch: 100, Senders: 4, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	// Senders 0 and 2 send requests 0, 4, ..., 28 and 2, 6, ..., 26 to the
	// first collector; 1 and 3 the rest to the second.
	if !s.Exact() || s.Refused != 0 || s.Records != 3000 || s.Unique != 2100 || s.Requests != 30 || !slices.Equal(s.PerCollector, []int64{1500, 1500}) ||
		s.Counts.Records["unique"] != 2100 ||
		len(s.RedisNodes) != 1 || s.RedisNodes[0].Keys != s.Redis.Keys {
		t.Errorf("scale: %+v", s)
	}

	w, err := RunWaitCost(ctx, f, d, sink, WaitCostConfig{Size: 100, Trials: 2, Offset: 5 * time.Millisecond, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range WaitCases {
		if len(w.Latency[c]) != 2 {
			t.Errorf("%s: %d latencies, want 2", c, len(w.Latency[c]))
		}
	}
	// Each copy sent while its original was exporting waited for it.
	if w.Counts.Waits["settled"].Count < 4 || w.Counts.Waits["refused"].Count != 0 || w.Refused != 0 || len(w.Originals) != 4 {
		t.Errorf("waits %+v, refused %d, originals %v", w.Counts.Waits, w.Refused, w.Originals)
	}
	if !w.Exact() || w.Distinct != 1000 || w.Delivered != 1000 || w.DeliveredN[1] != 1000 {
		t.Errorf("wait cost at the sink: %d delivered, %d distinct, %v", w.Delivered, w.Distinct, w.DeliveredN)
	}
	// The race's 500 and its warm-up round's 100, the scaling run's 2100
	// and its warm-up request's 100, and the wait cost's 1000.
	if n, ids := sink.Received(); n != 3800 || len(ids) != 3800 {
		t.Errorf("the sink received %d records, %d distinct; want 3800 once each", n, len(ids))
	}
}
