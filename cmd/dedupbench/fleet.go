package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/bench"
)

// The fleet phase: collectors of the distribution sharing one Redis,
// standalone and a 3-master Cluster.
const (
	targetRaceRatio  = 0.90 // target 6: Cluster records/s within 10% of standalone's on the racing load
	clusterMasters   = 3
	fleetBatch       = 1000 // requests of the scaling load
	fleetDuplicates  = 0.3
	sendersPerFleet  = 2 // senders per collector in the scaling runs
	waitSinkDelay    = 50 * time.Millisecond
	waitCopyOffset   = 10 * time.Millisecond
	modelCollectors  = 50
	modelMasters     = 30
	modelWindow      = 10 * time.Minute // the processor's default window
	fleetCollectorsN = 4                // the largest fleet measured
)

var (
	raceSizes        = []int{1000, 8192}
	fleetSizes       = []int{1, 2, 4}
	fleetTopologies  = []string{bench.TopologyStandalone, bench.TopologyCluster}
	errFleetNotExact = errors.New("not every record was let through exactly once")
)

// runFleetPhase runs the racing copies, the fleet scaling and the wait cost,
// and writes fleet.md to o.out.
func runFleetPhase(ctx context.Context, o options, res *results, logf func(string, ...any), tmp string) error {
	dir := filepath.Join(tmp, "fleet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	std, err := bench.StartStandalone(o.redisServer)
	if err != nil {
		return err
	}
	defer std.Stop()
	cl, err := bench.StartCluster(ctx, o.redisServer, o.redisCLI, clusterMasters)
	if err != nil {
		return err
	}
	defer cl.Stop()
	deployments := map[string]*bench.RedisDeployment{bench.TopologyStandalone: std, bench.TopologyCluster: cl}
	logf("redis-server standalone on %s (pid %d); Cluster of %d masters on %v (pids %v)", std.Endpoints()[0], std.PIDs()[0], clusterMasters, cl.Endpoints(), cl.PIDs())

	fleets := map[string]bench.Fleet{}
	defer func() {
		for _, f := range fleets {
			_ = f.Stop()
		}
	}()
	for _, topo := range fleetTopologies {
		f, err := bench.StartFleet(ctx, o.bin, dir, topo, fleetCollectorsN, bench.FleetConfig{Key: bench.KeyEventID, Redis: deployments[topo].Endpoints()})
		if err != nil {
			return err
		}
		fleets[topo] = f
		pids := make([]int, len(f))
		for i, c := range f {
			pids[i] = c.PID
		}
		logf("%d collectors on %s Redis (pids %v)", len(f), topo, pids)
	}
	res.Commands = append(res.Commands,
		fmt.Sprintf("fleet: %s collectors (otlp -> dedup keyed on event.id, redis on_error: refuse -> nop), on a standalone redis-server and on a %d-master Cluster", o.bin, clusterMasters),
		fmt.Sprintf("racing copies: 2 collectors, the same request sent to both at once, requests of %v records, %d distinct records per run, %d runs per topology and size, alternating", raceSizes, o.fleetRecords, o.fleetReps),
		fmt.Sprintf("fleet scaling: %v collectors, %d synchronous senders per collector, %d records, %.0f%% copies sharing event.id (loadgen), batches of %d", fleetSizes, sendersPerFleet, o.fleetRecords, 100*fleetDuplicates, fleetBatch),
		fmt.Sprintf("wait cost: 2 collectors on standalone Redis exporting to a backend holding each export %s, requests of 1000, copies sent %s after their original, %d trials per case", waitSinkDelay, waitCopyOffset, o.waitTrials))

	seed := uint64(1000)
	for rep := range o.fleetReps {
		for _, size := range raceSizes {
			rounds := max(1, int(o.fleetRecords)/size)
			for _, topo := range fleetTopologies {
				if err := deployments[topo].FlushAll(ctx); err != nil {
					return err
				}
				seed++
				r, err := bench.RunRace(ctx, fleets[topo][:2], deployments[topo], bench.RaceConfig{Size: size, Rounds: rounds, Seed: seed})
				if err != nil {
					return fmt.Errorf("racing copies, %s, requests of %d: %w", topo, size, err)
				}
				res.Race = append(res.Race, r)
				w := r.Counts.AllWaits()
				logf("race %d %-10s %5d x %-4d: %s distinct records/s, refused %d, exact %v, waits %d (p50 %s, p99 %s), round trips %v, Redis CPU %.2f µs/key",
					rep+1, topo, size, rounds, bench.Rate(r.RecordsPerSecond()), r.Refused, r.Exact(), int64(w.Count), bench.Millis(w.Quantile(0.5)), bench.Millis(w.Quantile(0.99)),
					r.Counts.RedisRequests, r.CPU.Redis*1e6/float64(r.Records))
			}
		}
	}

	for _, topo := range fleetTopologies {
		for _, n := range fleetSizes {
			seed++
			r, err := bench.RunScale(ctx, fleets[topo][:n], deployments[topo], bench.ScaleConfig{
				Records: o.fleetRecords, Duplicates: fleetDuplicates, Batch: fleetBatch, Senders: sendersPerFleet * n, Seed: seed})
			if err != nil {
				return fmt.Errorf("fleet scaling, %s, %d collectors: %w", topo, n, err)
			}
			res.Scale = append(res.Scale, r)
			logf("scale %-10s %d collectors, %d senders: %s records/s, CPU s collectors %.2f redis %.2f senders %.2f others %.2f in %.2fs; Redis %.2f µs/key; %.2f round trips/batch (%v); waits %d; refused %d; exact %v",
				topo, n, r.Senders, bench.Rate(r.RecordsPerSecond()), r.CPU.Collectors, r.CPU.Redis, r.CPU.Driver, r.CPU.Others, r.Seconds,
				r.CPU.Redis*1e6/float64(r.Unique), float64(r.Counts.RoundTrips())/float64(r.Requests), r.Counts.RedisRequests,
				int64(r.Counts.AllWaits().Count), r.Refused, r.Exact())
			if topo == bench.TopologyCluster && n == fleetSizes[len(fleetSizes)-1] {
				tags, err := cl.HashTags(ctx)
				if err != nil {
					return err
				}
				delete(tags, "")
				res.ClusterTags = len(tags)
				logf("the Cluster's keys carry %d hash tags", res.ClusterTags)
			}
		}
	}
	for topo, f := range fleets {
		delete(fleets, topo)
		if err := f.Stop(); err != nil {
			return err
		}
	}

	if err := std.FlushAll(ctx); err != nil {
		return err
	}
	sink, err := bench.NewDelaySink(waitSinkDelay)
	if err != nil {
		return err
	}
	defer sink.Close()
	wf, err := bench.StartFleet(ctx, o.bin, dir, "wait", 2, bench.FleetConfig{Key: bench.KeyEventID, Redis: std.Endpoints(), Sink: sink.Endpoint()})
	if err != nil {
		return err
	}
	fleets["wait"] = wf
	seed++
	wc, err := bench.RunWaitCost(ctx, wf, std, sink, bench.WaitCostConfig{Size: 1000, Trials: o.waitTrials, Offset: waitCopyOffset, Seed: seed})
	if err != nil {
		return fmt.Errorf("wait cost: %w", err)
	}
	res.WaitCost = &wc
	logf("wait cost:\n%s", bench.FormatWaitCost(wc))

	if err := os.WriteFile(filepath.Join(o.out, "fleet.md"), []byte(fleetDoc(res)), 0o644); err != nil {
		return err
	}
	if !fleetExact(res) {
		return errFleetNotExact
	}
	return nil
}

// fleetExact reports whether every fleet run let each record through once.
func fleetExact(res *results) bool {
	for _, r := range res.Race {
		if !r.Exact() {
			return false
		}
	}
	for _, r := range res.Scale {
		if !r.Exact() {
			return false
		}
	}
	return res.WaitCost == nil || res.WaitCost.Exact()
}

// fleetModel is the 50-collector, 30-master model from the Cluster points.
func fleetModel(res *results) (bench.FleetModel, []bench.ScaleResult, error) {
	var points []bench.ScaleResult
	for _, r := range res.Scale {
		if r.Topology == bench.TopologyCluster {
			points = append(points, r)
		}
	}
	m, err := bench.NewFleetModel(points, res.ClusterTags, modelCollectors, modelMasters, modelWindow)
	return m, points, err
}

// fleetDoc is fleet.md: the three measurements and the model.
func fleetDoc(res *results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Fleet measurements of `make bench`, %s; %s, %d cores; %s; %s. Collectors, Redis and senders share the machine's cores; load at the start of the phase: %s.\n\n",
		res.Date, res.Machine.CPUModel, res.Machine.Cores, res.Go, res.Redis, res.Load["fleet"])
	if len(res.Race) > 0 {
		b.WriteString("## Racing copies\n\nTwo collectors; each round sends the same request to both at the same moment.\n\n")
		b.WriteString(bench.FormatRace(res.Race))
		b.WriteString("\n")
	}
	if len(res.Scale) > 0 {
		fmt.Fprintf(&b, "## Fleet scaling\n\n%d synchronous senders per collector, loadgen's stream with %.0f%% copies sharing event.id, batches of %d.\n\n", sendersPerFleet, 100*fleetDuplicates, fleetBatch)
		b.WriteString(bench.FormatScale(res.Scale))
		b.WriteString("\n")
	}
	if res.WaitCost != nil {
		b.WriteString("## The cost of waiting\n\n")
		b.WriteString(bench.FormatWaitCost(*res.WaitCost))
		b.WriteString("\n")
	}
	if m, points, err := fleetModel(res); err == nil {
		fmt.Fprintf(&b, "## Model: %d collectors on %d masters\n\n", m.Collectors, m.Masters)
		b.WriteString(m.Format())
		fmt.Fprintf(&b, "\nThe model's lines against the measured Cluster points it was fitted on (records/s if CPU-bound: the %d cores less what other processes used, over the CPU a record costs the collectors, the senders and Redis there):\n\n", res.Machine.Cores)
		b.WriteString(bench.FormatModelChecks(m.Check(points, res.Machine.Cores)))
	}
	return b.String()
}

// fleetRows are target 6's rows: the racing copies and the fleet scaling.
func fleetRows(res *results, missing func(t, fig, goal, phase string) bench.Row) []bench.Row {
	var rows []bench.Row
	if len(res.Race) == 0 {
		return append(rows, missing("6", "racing copies across 2 collectors: Cluster / standalone records/s", fmt.Sprintf(">= %.2fx", targetRaceRatio), "fleet"))
	}
	sums := bench.SummarizeRace(res.Race)
	for _, size := range raceSizes {
		ratios := bench.RaceRatios(res.Race, size)
		fig := fmt.Sprintf("racing copies across 2 collectors, requests of %d: distinct records/s, Cluster (%d masters) / standalone; median of %d pairs", size, clusterMasters, len(ratios))
		m, ok := bench.Median(ratios)
		if !ok {
			rows = append(rows, missing("6", fig, fmt.Sprintf(">= %.2fx", targetRaceRatio), "fleet"))
			continue
		}
		var cl, st float64
		for _, s := range sums {
			if s.Size == size && s.Topology == bench.TopologyCluster {
				cl = s.RecordsPerSecond
			}
			if s.Size == size && s.Topology == bench.TopologyStandalone {
				st = s.RecordsPerSecond
			}
		}
		rows = append(rows, bench.Row{Target: "6", Figure: fig,
			Measured: fmt.Sprintf("%.2fx (medians %s / %s)", m, bench.Rate(cl), bench.Rate(st)),
			Goal:     fmt.Sprintf(">= %.2fx", targetRaceRatio), Verdict: bench.Check(m >= targetRaceRatio)})
	}
	var refused, settled, refusedWaits int64
	exact := true
	var parts []string
	for _, s := range sums {
		refused += s.Refused
		settled += s.Settled
		refusedWaits += s.RefusedWaits
		exact = exact && s.Exact
		parts = append(parts, fmt.Sprintf("%s/%d: %d waits, p50 %s p99 %s, %.2f round trips/batch",
			s.Topology, s.Size, s.Settled+s.RefusedWaits, bench.Millis(s.WaitP50), bench.Millis(s.WaitP99), s.RoundTrips))
	}
	rows = append(rows,
		bench.Row{Target: "6", Figure: "racing copies: requests refused (retryable; sent again)", Measured: fmt.Sprint(refused), Goal: "0", Verdict: bench.Check(refused == 0)},
		bench.Row{Target: "6", Figure: "racing copies: each record let through once, dropped once (the collectors' counters)", Measured: yesNo(exact), Goal: "yes", Verdict: bench.Check(exact)},
		bench.Row{Target: "6", Figure: "racing copies: waits for batches in flight (wait_duration), round trips per batch", Measured: strings.Join(parts, "; "), Verdict: bench.Info})
	for _, r := range res.Scale {
		rows = append(rows, bench.Row{Target: "6",
			Figure: fmt.Sprintf("fleet of %d on %s Redis, %d senders, %.0f%% copies: records/s; CPU cores collectors/Redis/senders/others; Redis CPU per key; round trips per batch", r.Collectors, r.Topology, r.Senders, 100*fleetDuplicates),
			Measured: fmt.Sprintf("%s/s; %.2f/%.2f/%.2f/%.2f; %.2f µs; %.2f%s", bench.Rate(r.RecordsPerSecond()),
				r.CPU.Collectors/r.Seconds, r.CPU.Redis/r.Seconds, r.CPU.Driver/r.Seconds, r.CPU.Others/r.Seconds,
				r.CPU.Redis*1e6/float64(r.Unique), float64(r.Counts.RoundTrips())/float64(r.Requests), exactNote(r.Exact(), r.Refused)),
			Verdict: bench.Info})
	}
	if res.WaitCost != nil {
		w := res.WaitCost
		rows = append(rows, bench.Row{Target: "6",
			Figure: fmt.Sprintf("wait cost (backend holds each export %s): request latency p50, no copy in flight / copy on the other collector / on the same one / after delivery", w.Delay),
			Measured: fmt.Sprintf("%s / %s / %s / %s", bench.Millis(bench.Percentile(w.Latency[bench.WaitNoCopy], 50)), bench.Millis(bench.Percentile(w.Latency[bench.WaitCopyOther], 50)),
				bench.Millis(bench.Percentile(w.Latency[bench.WaitCopySame], 50)), bench.Millis(bench.Percentile(w.Latency[bench.WaitCopyCommitted], 50))),
			Verdict: bench.Info})
	}
	return rows
}

func exactNote(exact bool, refused int64) string {
	var notes []string
	if !exact {
		notes = append(notes, "NOT exactly once")
	}
	if refused > 0 {
		notes = append(notes, fmt.Sprintf("%d refused", refused))
	}
	if len(notes) == 0 {
		return ""
	}
	return " (" + strings.Join(notes, ", ") + ")"
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}
