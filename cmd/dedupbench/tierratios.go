package main

import (
	"fmt"

	"github.com/otelcol-dedup/otelcol-dedup/internal/bench"
)

// redisTierRows are target 5's rows besides the collector's CPU ratio: the
// Redis CPU a key costs through the tier against a plain SET NX PX (the
// redis phase), and the end-to-end throughput with the tier against the
// pass-through, with where the difference goes (the e2e phase).
func redisTierRows(res *results, o options, missing func(t, fig, goal, phase string) bench.Row) []bench.Row {
	var rows []bench.Row
	serverFig := "Redis server CPU per key (INFO used_cpu, the whole process): the tier's claim + commit / redis-benchmark's SET NX PX, same server; median of paired runs"
	if len(res.Tier) > 0 && len(res.Tier) == len(res.Baseline) {
		var ratios, inCmd []float64
		for i, t := range res.Tier {
			b := res.Baseline[i]
			if t.Server.CPUSeconds > 0 && b.Server.CPUSeconds > 0 && t.Records > 0 {
				ratios = append(ratios, (t.Server.CPUSeconds/float64(t.Records))/(b.Server.CPUSeconds/float64(o.records)))
			}
			if n := b.Server.Calls["set"]; n > 0 && t.Records > 0 && b.Server.Usec["set"] > 0 {
				script := float64(t.Server.Usec["evalsha"]+t.Server.Usec["eval"]) / float64(t.Records)
				inCmd = append(inCmd, script/(float64(b.Server.Usec["set"])/float64(n)))
			}
		}
		if m, ok := bench.Median(ratios); ok {
			rows = append(rows, bench.Row{Target: "5", Figure: serverFig,
				Measured: fmt.Sprintf("%.2fx (%d pairs)", m, len(ratios)),
				Goal:     fmt.Sprintf("<= %.2fx", targetServerRatio), Verdict: bench.Check(m <= targetServerRatio)})
		} else {
			rows = append(rows, missing("5", serverFig, fmt.Sprintf("<= %.2fx", targetServerRatio), "redis"))
		}
		if mi, ok := bench.Median(inCmd); ok {
			rows = append(rows, bench.Row{Target: "5", Figure: "the same inside commands (INFO commandstats): the claim script's time per key / SET NX PX's per call",
				Measured: fmt.Sprintf("%.2fx", mi), Verdict: bench.Info})
		}
	} else {
		rows = append(rows, missing("5", serverFig, fmt.Sprintf("<= %.2fx", targetServerRatio), "redis"))
	}

	tputFig := fmt.Sprintf("end-to-end records/s, dedup+redis / pass-through, %d synchronous senders; median of paired runs", e2eSenders)
	setPerOp := setCPUPerOp(res.Baseline, o.records)
	costs := throughputCosts(res.Collector, res.Machine.Cores, setPerOp)
	if len(costs) == 0 {
		return append(rows, missing("5", tputFig, fmt.Sprintf(">= %.2fx", targetRedisThroughput), "e2e"))
	}
	med := func(f func(throughputCost) float64) float64 {
		vs := make([]float64, len(costs))
		for i, c := range costs {
			vs[i] = f(c)
		}
		m, _ := bench.Median(vs)
		return m
	}
	ratio := med(func(c throughputCost) float64 { return c.Ratio })
	rows = append(rows, bench.Row{Target: "5", Figure: tputFig,
		Measured: fmt.Sprintf("%.2fx (%d pairs)", ratio, len(costs)),
		Goal:     fmt.Sprintf(">= %.2fx", targetRedisThroughput), Verdict: bench.Check(ratio >= targetRedisThroughput)})
	byWait, byRedisCPU := med(func(c throughputCost) float64 { return c.ByWait }), med(func(c throughputCost) float64 { return c.ByRedisCPU })
	byCopies := med(func(c throughputCost) float64 { return c.ByCopyWait })
	dominant := "the senders waiting on round trips"
	switch {
	case byCopies < byWait && byCopies < byRedisCPU:
		dominant = "the senders waiting for copies in flight"
	case byRedisCPU < byWait:
		dominant = "redis-server's CPU on the shared cores"
	}
	rows = append(rows, bench.Row{Target: "5",
		Figure: "where the throughput goes: the senders' time in Redis round trips (the ratio that alone would give); their time waiting for the export of another batch holding a copy of their records (the same); redis-server's share of the run's CPU (the ratio that alone would give if CPU-bound; with all the extra CPU); CPU busy, pass-through / dedup+redis",
		Measured: fmt.Sprintf("%.0f%% (%.2fx); %.0f%% (%.2fx); %.0f%% (%.2fx; %.2fx); %.0f%% / %.0f%% of %d cores; largest cost: %s",
			100*med(func(c throughputCost) float64 { return c.WaitShare }), byWait,
			100*med(func(c throughputCost) float64 { return c.CopyWaitShare }), byCopies,
			100*med(func(c throughputCost) float64 { return c.RedisCPUShare }), byRedisCPU, med(func(c throughputCost) float64 { return c.ByAllCPU }),
			100*med(func(c throughputCost) float64 { return c.BusyPass }), 100*med(func(c throughputCost) float64 { return c.BusyRedis }), res.Machine.Cores,
			dominant),
		Verdict: bench.Info})
	if local := med(func(c throughputCost) float64 { return c.LocalRatio }); local > 0 {
		rows = append(rows, bench.Row{Target: "5",
			Figure:   "the same rounds' end-to-end records/s with the local tier alone (dedup without redis) / pass-through: what the delivery guarantee's waits for copies in flight and the local tier cost without Redis",
			Measured: fmt.Sprintf("%.2fx", local), Verdict: bench.Info})
	}
	if floor := med(func(c throughputCost) float64 { return c.ByFloor }); floor > 0 {
		rows = append(rows, bench.Row{Target: "5",
			Figure: "the ceiling these cores put on the ratio if Redis did no more per delivered record than one pipelined SET NX PX (redis-benchmark's server CPU per op, the redis phase) and nothing else were added: the pass-through's CPU per record against it plus that floor, if CPU-bound",
			Measured: fmt.Sprintf("%.2fx (%.2f µs per op, %.2f keys per record)", floor,
				setPerOp*1e6, med(func(c throughputCost) float64 { return c.KeysPerRecord })),
			Verdict: bench.Info})
	}
	return rows
}

// setCPUPerOp is redis-benchmark's median server CPU seconds per SET NX PX
// (the whole process, pipelined), or 0 without a redis phase.
func setCPUPerOp(baseline []bench.BaselineResult, ops int64) float64 {
	var per []float64
	for _, b := range baseline {
		if b.Server.CPUSeconds > 0 && ops > 0 {
			per = append(per, b.Server.CPUSeconds/float64(ops))
		}
	}
	m, _ := bench.Median(per)
	return m
}

// throughputCost compares one round's dedup+redis run with its
// pass-through run, and estimates what each of three costs alone would make
// of the throughput ratio:
//   - the senders waiting: each synchronous sender also waits out its
//     batches' Redis round trips (the redis_duration sum over senders, the
//     commits' left out: they are sent after the sender is answered), all
//     else equal;
//   - the senders waiting for copies in flight: a batch holding a copy of
//     a record another batch is still exporting waits for that export (the
//     wait_duration sum over senders), all else equal;
//   - Redis's CPU: if the machine's cores are the limit, throughput goes as
//     1 / CPU per record, and redis-server adds its CPU per record to the
//     pass-through's (collector + senders); with the collector's own extra
//     work too (ByAllCPU).
//
// Two references go with it: the same round's local-tier run against the
// pass-through (LocalRatio), and the ratio the cores would allow, CPU-bound,
// if redis-server spent only the CPU of one pipelined SET NX PX (setPerOp)
// per record the tier claimed and the collector nothing more (ByFloor).
type throughputCost struct {
	Ratio                    float64 // measured records/s ratio
	LocalRatio               float64 // the local tier's records/s ratio, 0 if not run
	KeysPerRecord            float64 // records claimed (delivered) per record received
	ByFloor                  float64 // 0 without setPerOp
	WaitShare, RedisCPUShare float64
	CopyWaitShare            float64
	ByWait, ByRedisCPU       float64
	ByCopyWait               float64
	ByAllCPU                 float64
	BusyPass, BusyRedis      float64 // the run's own CPU / (wall x cores)
}

func throughputCosts(runs []bench.CollectorRun, cores int, setPerOp float64) []throughputCost {
	var out []throughputCost
	var pass, local *bench.CollectorRun
	for i := range runs {
		r := &runs[i]
		switch r.Mode {
		case bench.ModePassThrough:
			pass, local = r, nil
		case bench.ModeDedup:
			local = r
		case bench.ModeDedupRedis:
			if pass == nil || r.Load.Seconds <= 0 || pass.Load.Seconds <= 0 {
				continue
			}
			passCPU := (pass.CPUSeconds + pass.DriverCPUSeconds) / float64(pass.Load.Sent)
			ownCPU := r.CPUSeconds + r.DriverCPUSeconds + r.RedisCPUSeconds
			redisPer := r.RedisCPUSeconds / float64(r.Load.Sent)
			c := throughputCost{
				Ratio:         r.Load.RecordsPerSecond / pass.Load.RecordsPerSecond,
				WaitShare:     r.RedisWaitSeconds / (e2eSenders * r.Load.Seconds),
				RedisCPUShare: r.RedisCPUSeconds / ownCPU,
				ByWait:        pass.Load.Seconds / (pass.Load.Seconds + r.RedisWaitSeconds/e2eSenders),
				CopyWaitShare: r.CopyWaitSeconds / (e2eSenders * r.Load.Seconds),
				ByCopyWait:    pass.Load.Seconds / (pass.Load.Seconds + r.CopyWaitSeconds/e2eSenders),
				ByRedisCPU:    passCPU / (passCPU + redisPer),
				ByAllCPU:      passCPU / (ownCPU / float64(r.Load.Sent)),
				BusyPass:      (pass.CPUSeconds + pass.DriverCPUSeconds) / (pass.Load.Seconds * float64(max(cores, 1))),
				BusyRedis:     ownCPU / (r.Load.Seconds * float64(max(cores, 1))),
			}
			if local != nil && local.Load.Seconds > 0 {
				c.LocalRatio = local.Load.RecordsPerSecond / pass.Load.RecordsPerSecond
			}
			if setPerOp > 0 {
				c.KeysPerRecord = float64(r.Load.Sent-r.Dropped) / float64(r.Load.Sent)
				c.ByFloor = passCPU / (passCPU + setPerOp*c.KeysPerRecord)
			}
			out = append(out, c)
		}
	}
	return out
}
