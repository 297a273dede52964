package bench

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/metric"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor"
)

// Key modes of the in-process runs, as in BenchmarkConsumeLogs.
const (
	KeyContent = "content"  // empty key: the record's whole content
	KeyEventID = "event.id" // key [attributes["event.id"]]
)

// passKey is the client metadata key whose value makes every pass over the
// same batches a new set of identities (the processor puts metadata_keys'
// values into every identity), so batches are replayed without rebuilding
// them and the duplicate ratio stays the one asked for.
const passKey = "bench-pass"

// PassContext returns a context whose client metadata makes pass its own
// identity space.
func PassContext(pass string) context.Context {
	return client.NewContext(context.Background(), client.Info{
		Metadata: client.NewMetadata(map[string][]string{passKey: {pass}}),
	})
}

// IsCopy tells whether the record at position pos of a stream with dupPct
// percent copies is a copy: exactly floor(n*dupPct/100) of the first n
// records are, spread evenly (the first record is always an original).
func IsCopy(pos int64, dupPct int) bool {
	return (pos+1)*int64(dupPct)/100 > pos*int64(dupPct)/100
}

// GenLogs builds nb batches of size records, dupPct percent of them copies
// (byte-identical, so also the same event.id) of an earlier record of the
// set, in the same or an earlier batch. Each record looks like
// BenchmarkConsumeLogs's: a resource with service.name and host.name, a
// timestamp, a body, attributes event.id and http.status_code.
func GenLogs(nb, size, dupPct int) []plog.Logs {
	out := make([]plog.Logs, nb)
	var pos, next int64 // stream position, originals so far
	for b := range out {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "checkout")
		rl.Resource().Attributes().PutStr("host.name", "node-17")
		lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
		lrs.EnsureCapacity(size)
		for range size {
			id := next
			if next > 0 && IsCopy(pos, dupPct) {
				id = int64(mix64(uint64(pos)) % uint64(next))
			} else {
				next++
			}
			pos++
			lr := lrs.AppendEmpty()
			lr.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + 1000*uint64(id)))
			lr.Body().SetStr("order " + strconv.FormatInt(id, 10) + " placed")
			lr.Attributes().PutStr("event.id", fmt.Sprintf("evt-%08d", id))
			lr.Attributes().PutInt("http.status_code", 200)
		}
		out[b] = ld
	}
	return out
}

func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// ProcOptions configures an in-process dedup logs processor.
type ProcOptions struct {
	Key        string // KeyContent or KeyEventID
	MaxEntries int    // cache.max_entries; 0: the default (10^6)
	// Redis is the address of a standalone server for the shared tier;
	// empty for the local tier only. The tier gets a 5 s timeout and
	// on_error: refuse, so a failing Redis fails the run instead of
	// quietly falling back to the local tier.
	Redis         string
	Next          consumer.Logs
	MeterProvider metric.MeterProvider // nil: a no-op one
}

// NewProcessor creates and starts a dedup logs processor through the
// component's public factory, as the collector does. metadata_keys is
// [bench-pass] (see PassContext).
func NewProcessor(ctx context.Context, o ProcOptions) (processor.Logs, error) {
	f := dedupprocessor.NewFactory()
	cfg := f.CreateDefaultConfig().(*dedupprocessor.Config)
	cfg.MetadataKeys = []string{passKey}
	switch o.Key {
	case KeyContent:
	case KeyEventID:
		cfg.Logs.Key = []string{`attributes["event.id"]`}
	default:
		return nil, fmt.Errorf("key %q: want %s or %s", o.Key, KeyContent, KeyEventID)
	}
	if o.MaxEntries > 0 {
		cfg.Cache.MaxEntries = o.MaxEntries
	}
	if o.Redis != "" {
		cfg.Redis = configoptional.Some(dedupprocessor.RedisConfig{
			Endpoints: []string{o.Redis},
			Mode:      dedupprocessor.RedisModeAuto,
			Timeout:   5 * time.Second,
			Lease:     30 * time.Second,
			OnError:   dedupprocessor.ErrorRefuse,
		})
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	set := processortest.NewNopSettings(f.Type())
	if o.MeterProvider != nil {
		set.TelemetrySettings.MeterProvider = o.MeterProvider
	}
	next := o.Next
	if next == nil {
		next = &CountingConsumer{}
	}
	p, err := f.CreateLogs(ctx, set, cfg, next)
	if err != nil {
		return nil, err
	}
	if err := p.Start(ctx, componenttest.NewNopHost()); err != nil {
		return nil, err
	}
	return p, nil
}

// CountingConsumer is the next consumer of in-process runs: it counts the
// records it receives and calls OnBatch, if set, first.
type CountingConsumer struct {
	Records atomic.Int64
	Batches atomic.Int64
	OnBatch func()
}

func (c *CountingConsumer) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: false}
}

func (c *CountingConsumer) ConsumeLogs(_ context.Context, ld plog.Logs) error {
	if c.OnBatch != nil {
		c.OnBatch()
	}
	c.Records.Add(int64(ld.LogRecordCount()))
	c.Batches.Add(1)
	return nil
}

// SweepPoint is one measured point of the throughput sweep: the median of
// its trials.
type SweepPoint struct {
	Key     string
	Batch   int
	DupPct  int
	Records int64   // records of the median trial
	Seconds float64 // time the median trial spent in ConsumeLogs only
	// TrialNs is every trial's ns per record, in the order run.
	TrialNs []float64
}

// RecordsPerSecond is Records / Seconds.
func (p SweepPoint) RecordsPerSecond() float64 { return float64(p.Records) / p.Seconds }

// NsPerRecord is Seconds per record in nanoseconds.
func (p SweepPoint) NsPerRecord() float64 { return p.Seconds * 1e9 / float64(p.Records) }

// SweepConfig is the grid of the sweep.
type SweepConfig struct {
	Keys    []string
	Batches []int
	DupPcts []int
	// Records per point (at least), split evenly between Trials trials
	// (default 3) whose median is the point: ~10^6 gives each point a few
	// hundred milliseconds of processing.
	Records int64
	Trials  int
	// Warm fills the cache (default size, 10^6) before the first point of
	// each processor, so the points measure a busy gateway's full cache.
	Warm int64
}

// Sweep measures ConsumeLogs on one goroutine for every key, batch size and
// duplicate ratio of cfg. One processor per key and batch size serves all
// its ratios; its cache is filled first (cfg.Warm unique records) and stays
// full. Batches are copied before each call, outside the timed section,
// since the processor removes duplicates in place. The caller decides
// GOMAXPROCS (make bench: 1, the "one core" of the target).
func Sweep(ctx context.Context, cfg SweepConfig, progress func(SweepPoint)) ([]SweepPoint, error) {
	var out []SweepPoint
	pass := 0
	for _, key := range cfg.Keys {
		for _, size := range cfg.Batches {
			sink := &CountingConsumer{}
			p, err := NewProcessor(ctx, ProcOptions{Key: key, Next: sink})
			if err != nil {
				return out, err
			}
			if cfg.Warm > 0 {
				warm := GenLogs(16, 1000, 0)
				var done int64
				for done < cfg.Warm {
					pass++
					pctx := PassContext("warm-" + strconv.Itoa(pass))
					for _, ld := range warm {
						w := plog.NewLogs()
						ld.CopyTo(w)
						if err := p.ConsumeLogs(pctx, w); err != nil {
							return out, err
						}
						done += int64(ld.LogRecordCount())
					}
				}
			}
			for _, dup := range cfg.DupPcts {
				pt, err := sweepPoint(p, key, size, dup, cfg.Records, max(cfg.Trials, 1), &pass)
				if err != nil {
					_ = p.Shutdown(ctx)
					return out, err
				}
				out = append(out, pt)
				if progress != nil {
					progress(pt)
				}
			}
			if err := p.Shutdown(ctx); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

func sweepPoint(p processor.Logs, key string, size, dup int, records int64, trials int, pass *int) (SweepPoint, error) {
	nb := max(4, min(64, 200_000/size))
	src := GenLogs(nb, size, dup)
	work := make([]plog.Logs, nb)
	for i := range work {
		work[i] = plog.NewLogs()
	}
	type trial struct {
		records int64
		elapsed time.Duration
	}
	ts := make([]trial, trials)
	pt := SweepPoint{Key: key, Batch: size, DupPct: dup}
	for i := range ts {
		runtime.GC()
		t := &ts[i]
		for t.records < records/int64(trials) {
			*pass++
			ctx := PassContext(strconv.Itoa(*pass))
			for k := range src {
				src[k].CopyTo(work[k])
				start := time.Now()
				if err := p.ConsumeLogs(ctx, work[k]); err != nil {
					return pt, err
				}
				t.elapsed += time.Since(start)
				t.records += int64(size)
			}
		}
		pt.TrialNs = append(pt.TrialNs, float64(t.elapsed.Nanoseconds())/float64(t.records))
	}
	// The median trial (trials are whole passes, so their sizes are equal).
	order := make([]int, trials)
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(pt.TrialNs[a], pt.TrialNs[b]) })
	m := ts[order[trials/2]]
	pt.Records, pt.Seconds = m.records, m.elapsed.Seconds()
	return pt, nil
}

// Passes hands out pass contexts: a goroutine-safe counter.
type Passes struct{ n atomic.Int64 }

// Next returns a context for a new pass.
func (p *Passes) Next(prefix string) context.Context {
	return PassContext(prefix + strconv.FormatInt(p.n.Add(1), 10))
}

// ReplayParallel runs batches of unique records through p from goroutines
// goroutines until total records went in, each goroutine replaying its own
// nb batches under new pass contexts, and returns the wall time. Unique
// batches pass through the processor unchanged, so they are replayed
// without copies.
func ReplayParallel(p processor.Logs, goroutines, nb, size int, total int64, passes *Passes) (time.Duration, error) {
	srcs := make([][]plog.Logs, goroutines)
	for g := range srcs {
		srcs[g] = GenLogs(nb, size, 0)
	}
	var left atomic.Int64
	left.Store(total / int64(size))
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	runtime.GC()
	start := time.Now()
	for g := range goroutines {
		wg.Go(func() {
			var ctx context.Context
			for i := 0; left.Add(-1) >= 0; i++ {
				if i%nb == 0 {
					ctx = passes.Next("g" + strconv.Itoa(g) + "-")
				}
				if err := p.ConsumeLogs(ctx, srcs[g][i%nb]); err != nil {
					errs[g] = err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return elapsed, err
		}
	}
	return elapsed, nil
}
