package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/internal/loadgen"
)

func TestCollectorConfig(t *testing.T) {
	for mode, want := range map[string][]string{ModePassThrough: {}, ModeLocal: {"dedup"}, ModeRedis: {"dedup"}} {
		b, _ := json.Marshal(CollectorConfig(mode, "127.0.0.1:9", "gzip", "127.0.0.1:6379", ""))
		var cfg struct {
			Extensions map[string]any
			Processors map[string]map[string]any
			Exporters  map[string]map[string]any
			Service    struct {
				Extensions []string
				Pipelines  map[string]struct{ Receivers, Processors, Exporters []string }
			}
		}
		if err := json.Unmarshal(b, &cfg); err != nil {
			t.Fatal(err)
		}
		logs := cfg.Service.Pipelines["logs"]
		if !reflect.DeepEqual(logs.Processors, want) || !reflect.DeepEqual(logs.Exporters, []string{"otlp_grpc"}) ||
			cfg.Exporters["otlp_grpc"]["endpoint"] != "127.0.0.1:9" {
			t.Errorf("%s: logs pipeline %+v, exporters %v", mode, logs, cfg.Exporters)
		}
		if _, redis := cfg.Processors["dedup"]["redis"]; redis != (mode == ModeRedis) {
			t.Errorf("%s: dedup %v", mode, cfg.Processors["dedup"])
		}
		if _, pprof := cfg.Extensions["pprof"]; pprof || !reflect.DeepEqual(cfg.Service.Extensions, []string{"health_check"}) {
			t.Errorf("%s without a profile: extensions %v", mode, cfg.Service.Extensions)
		}
	}
	b, _ := json.Marshal(CollectorConfig(ModeLocal, "127.0.0.1:9", "none", "", "/tmp/cpu.pprof"))
	if !strings.Contains(string(b), `"save_to_file":"/tmp/cpu.pprof"`) || !strings.Contains(string(b), `"compression":"none"`) {
		t.Errorf("with a profile:\n%s", b)
	}
}

func TestRunExact(t *testing.T) {
	load := loadgen.Summary{Sent: 1000, Unique: 700, Duplicates: 300, Requests: 1}
	for _, c := range []struct {
		name string
		run  Run
		err  string
	}{
		{"pass-through", Run{Mode: ModePassThrough, Load: load, Delivered: 1000, Distinct: 700}, ""},
		{"dedup", Run{Mode: ModeLocal, Load: load, Delivered: 700, Distinct: 700, Dropped: 300}, ""},
		{"leaked", Run{Mode: ModeRedis, Load: load, Delivered: 701, Distinct: 700, Dropped: 300}, "1 leaked"},
		{"lost", Run{Mode: ModeLocal, Load: load, Delivered: 700, Distinct: 699, Dropped: 300}, "1 lost"},
		{"miscounted", Run{Mode: ModeLocal, Load: load, Delivered: 700, Distinct: 700, Dropped: 299}, "counted 299 duplicates"},
		{"refused", Run{Mode: ModePassThrough, Load: loadgen.Summary{Sent: 999, Unique: 700, Errors: 1}, Delivered: 999, Distinct: 700}, "999 of 1000"},
	} {
		err := c.run.Exact(1000)
		if (c.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%s: got %v, want %q", c.name, err, c.err)
		}
	}
}
