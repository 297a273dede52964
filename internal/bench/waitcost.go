package bench

import (
	"context"
	"fmt"
	"maps"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"

	"github.com/otelcol-dedup/otelcol-dedup/cmd/dedupload/loadgen"
)

// DelaySink is an OTLP/gRPC logs backend on a loopback port that holds
// every export for a fixed delay before accepting it, like a backend whose
// writes take that long, and counts what it accepted by event.id.
type DelaySink struct {
	Delay time.Duration
	lis   net.Listener
	srv   *grpc.Server
	done  chan struct{}

	mu      sync.Mutex
	records int64
	ids     map[string]int
}

// NewDelaySink starts a sink holding each export for delay.
func NewDelaySink(delay time.Duration) (*DelaySink, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &DelaySink{Delay: delay, lis: lis, srv: grpc.NewServer(grpc.MaxRecvMsgSize(fleetMaxRecvMiB << 20)), done: make(chan struct{}), ids: map[string]int{}}
	plogotlp.RegisterGRPCServer(s.srv, &delaySinkLogs{s: s})
	go func() { defer close(s.done); _ = s.srv.Serve(lis) }()
	return s, nil
}

// Endpoint is the sink's host:port.
func (s *DelaySink) Endpoint() string { return s.lis.Addr().String() }

// Received is the records accepted and how many times each event.id was.
func (s *DelaySink) Received() (int64, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.records, maps.Clone(s.ids)
}

// Close stops the server, cutting exports still held.
func (s *DelaySink) Close() {
	s.srv.Stop()
	<-s.done
}

type delaySinkLogs struct {
	plogotlp.UnimplementedGRPCServer
	s *DelaySink
}

func (h *delaySinkLogs) Export(ctx context.Context, req plogotlp.ExportRequest) (plogotlp.ExportResponse, error) {
	t := time.NewTimer(h.s.Delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
		return plogotlp.NewExportResponse(), ctx.Err()
	}
	h.s.mu.Lock()
	defer h.s.mu.Unlock()
	forEachRecord(req.Logs(), func(lr plog.LogRecord) {
		h.s.records++
		if v, ok := lr.Attributes().Get("event.id"); ok {
			h.s.ids[v.Str()]++
		}
	})
	return plogotlp.NewExportResponse(), nil
}

func forEachRecord(ld plog.Logs, fn func(plog.LogRecord)) {
	for i := range ld.ResourceLogs().Len() {
		sls := ld.ResourceLogs().At(i).ScopeLogs()
		for j := range sls.Len() {
			lrs := sls.At(j).LogRecords()
			for k := range lrs.Len() {
				fn(lrs.At(k))
			}
		}
	}
}

// Cases of the wait-cost measurement.
const (
	WaitNoCopy        = "no copy in flight"        // a request of new records
	WaitCopyOther     = "copy, other collector"    // its original's batch still exporting on the other collector
	WaitCopySame      = "copy, same collector"     // the same, in the same collector
	WaitCopyCommitted = "copy, original delivered" // its original's batch already delivered
)

// WaitCases lists the cases in the order they are run and reported.
var WaitCases = []string{WaitNoCopy, WaitCopyOther, WaitCopySame, WaitCopyCommitted}

// WaitCostConfig is the wait-cost measurement: Trials trials of each case,
// requests of Size records, the copy sent Offset after its original.
type WaitCostConfig struct {
	Size   int
	Trials int
	Offset time.Duration
	Seed   uint64
}

// WaitCostResult is the latencies of each case's requests (the copy's, for
// the copy cases), and of the originals the copies met.
type WaitCostResult struct {
	Topology   string
	Delay      time.Duration // the sink's hold per export
	Offset     time.Duration
	Size       int
	Latency    map[string][]float64 // by case, seconds
	Originals  []float64            // the in-flight originals' latencies, seconds
	Refused    int64
	Counts     DedupCounts
	Delivered  int64         // records the sink accepted
	Distinct   int64         // distinct records sent
	DeliveredN map[int]int64 // event.ids by how many times the sink accepted them
}

// Exact reports whether the sink accepted every distinct record exactly
// once.
func (r WaitCostResult) Exact() bool {
	return r.Delivered == r.Distinct && r.DeliveredN[1] == r.Distinct && len(r.DeliveredN) == 1
}

// RunWaitCost measures, on a fleet of two collectors exporting to sink
// (whose every export takes sink.Delay), how long a request takes when it
// meets no copy in flight, and when it carries copies of a batch that is
// still being exported on the other collector or the same one, or was
// already delivered. Trials run one at a time, cases interleaved.
func RunWaitCost(ctx context.Context, f Fleet, redis *RedisDeployment, sink *DelaySink, cfg WaitCostConfig) (WaitCostResult, error) {
	res := WaitCostResult{Topology: redis.Topology, Delay: sink.Delay, Offset: cfg.Offset, Size: cfg.Size, Latency: map[string][]float64{}}
	if len(f) != 2 {
		return res, fmt.Errorf("the wait-cost measurement needs 2 collectors, got %d", len(f))
	}
	// One batch per case and trial, plus one to warm each collector up.
	batches := int64(len(WaitCases)*cfg.Trials + 2)
	gen, err := loadgen.NewGenerator(loadgen.Config{Records: batches * int64(cfg.Size), Batch: cfg.Size, Senders: 1, Key: loadgen.KeyEventID, Seed: cfg.Seed})
	if err != nil {
		return res, err
	}
	if err := redis.FlushAll(ctx); err != nil {
		return res, err
	}
	req := func(b int64) plogotlp.ExportRequest {
		return plogotlp.NewExportRequestFromLogs(gen.Batch(b).Logs)
	}
	var refused atomic.Int64 // the copy and its original are sent at once
	send := func(c *FleetCollector, b int64) (float64, error) {
		t := time.Now()
		n, err := c.Send(ctx, req(b))
		refused.Add(int64(n))
		return time.Since(t).Seconds(), err
	}
	a, other := f[0], f[1]
	for i, c := range f {
		if _, err := send(c, int64(i)); err != nil {
			return res, fmt.Errorf("warm-up: %w", err)
		}
	}
	refused.Store(0)
	before, err := scrapeDedup(ctx, f.metricsURLs())
	if err != nil {
		return res, err
	}
	// race sends batch b to a, then after the offset its copy to c; it
	// returns the copy's latency and records the original's.
	race := func(c *FleetCollector, b int64) (float64, error) {
		var orig float64
		var origErr error
		var wg sync.WaitGroup
		wg.Go(func() { orig, origErr = send(a, b) })
		time.Sleep(cfg.Offset)
		lat, err := send(c, b)
		wg.Wait()
		res.Originals = append(res.Originals, orig)
		if origErr != nil {
			return 0, origErr
		}
		return lat, err
	}
	b := int64(2)
	for range cfg.Trials {
		for _, kase := range WaitCases {
			var lat float64
			var err error
			switch kase {
			case WaitNoCopy:
				lat, err = send(other, b)
			case WaitCopyOther:
				lat, err = race(other, b)
			case WaitCopySame:
				lat, err = race(a, b)
			case WaitCopyCommitted:
				if _, err = send(a, b); err == nil {
					lat, err = send(other, b)
				}
			}
			if err != nil {
				return res, fmt.Errorf("%s: %w", kase, err)
			}
			res.Latency[kase] = append(res.Latency[kase], lat)
			b++
		}
	}
	after, err := scrapeDedup(ctx, f.metricsURLs())
	if err != nil {
		return res, err
	}
	res.Refused = refused.Load()
	res.Counts, err = after.Sub(before)
	// Every record of the run (the warm-up's too) by how often the sink
	// accepted it; the sink may hold other runs' records besides.
	_, ids := sink.Received()
	res.Distinct = gen.Uniques()
	res.Delivered, res.DeliveredN = deliveries(ids, gen.EventID, res.Distinct)
	return res, err
}

// deliveries counts how often the sink accepted each of the identities 0 to
// n-1 (received: by event.id): the records accepted in all, and the
// identities by how many times they were.
func deliveries(received map[string]int, eventID func(uint64) string, n int64) (int64, map[int]int64) {
	var delivered int64
	byCount := map[int]int64{}
	for id := range uint64(n) {
		k := received[eventID(id)]
		byCount[k]++
		delivered += int64(k)
	}
	return delivered, byCount
}

// Percentile is the p-th percentile (0-100) of vs by the nearest-rank
// method: the smallest value with at least p% of the values at or below it.
// NaN for no values.
func Percentile(vs []float64, p float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(vs))
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}
