package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
)

// harness runs redistest's Redis outside a test: it is the testkit.TB the
// harness asks for, a failure ends the run with an error, and close runs
// the cleanups (the server's stop, its directory's removal).
type harness struct{ cleanups []func() }

// harnessFailure is what Fatalf panics with, for startRedis to recover.
type harnessFailure string

func (h *harness) Helper() {}
func (h *harness) Errorf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "dedupbench: "+format+"\n", args...)
}
func (h *harness) Fatalf(format string, args ...any) {
	panic(harnessFailure(fmt.Sprintf(format, args...)))
}
func (h *harness) Cleanup(f func()) { h.cleanups = append(h.cleanups, f) }

func (h *harness) TempDir() string {
	dir, err := os.MkdirTemp("", "dedupbench-redis-")
	if err != nil {
		h.Fatalf("%v", err)
	}
	h.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func (h *harness) close() {
	for i := len(h.cleanups) - 1; i >= 0; i-- {
		h.cleanups[i]()
	}
}

// startRedis starts a standalone redis-server (no persistence, a loopback
// port of its own) with redistest; h.close stops it.
func startRedis(h *harness) (s *redistest.Server, err error) {
	defer func() {
		if r := recover(); r != nil {
			f, ok := r.(harnessFailure)
			if !ok {
				panic(r)
			}
			err = errors.New(string(f))
		}
	}()
	return redistest.Standalone(h), nil
}

// RedisCounts is the server's side of a run, from INFO: its CPU time
// (used_cpu_user + used_cpu_sys) and the commands it ran (scripts and the
// commands they call both counted).
type RedisCounts struct {
	CPUSeconds float64
	Calls      int64
}

// Sub is what the server did between before and c.
func (c RedisCounts) Sub(before RedisCounts) RedisCounts {
	return RedisCounts{CPUSeconds: c.CPUSeconds - before.CPUSeconds, Calls: c.Calls - before.Calls}
}

// redisCounts reads the server's CPU time and its calls of every command.
func redisCounts(ctx context.Context, s *redistest.Server) (RedisCounts, error) {
	txt, err := s.Client().Info(ctx, "everything").Result()
	if err != nil {
		return RedisCounts{}, err
	}
	return ParseRedisCounts(txt)
}

// ParseRedisCounts reads INFO output: used_cpu_user and used_cpu_sys, and
// the calls= of every cmdstat_ line (cmdstat_set:calls=12,usec=34,...).
func ParseRedisCounts(info string) (RedisCounts, error) {
	var c RedisCounts
	cpu := 0
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		switch {
		case k == "used_cpu_user" || k == "used_cpu_sys":
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return c, fmt.Errorf("INFO %s=%q: %w", k, v, err)
			}
			c.CPUSeconds += f
			cpu++
		case strings.HasPrefix(k, "cmdstat_"):
			calls, ok := strings.CutPrefix(v, "calls=")
			n, err := strconv.ParseInt(strings.Split(calls, ",")[0], 10, 64)
			if !ok || err != nil {
				return c, fmt.Errorf("INFO %s: want calls= first in %q", k, v)
			}
			c.Calls += n
		}
	}
	if cpu != 2 {
		return c, errors.New("INFO: want used_cpu_user and used_cpu_sys")
	}
	return c, nil
}

// flushRedis empties the server and resets its command statistics.
func flushRedis(ctx context.Context, s *redistest.Server) error {
	if err := s.Client().FlushAll(ctx).Err(); err != nil {
		return err
	}
	return s.Client().ConfigResetStat(ctx).Err()
}

// RedisBenchmarkArgs are the arguments of the baseline: pipelined
// `SET key v NX PX 600000` with random keys, from clients connections,
// pipeline commands per round trip, n commands in all.
func RedisBenchmarkArgs(port, clients, pipeline, n int) []string {
	return []string{
		"-h", "127.0.0.1", "-p", strconv.Itoa(port),
		"-c", strconv.Itoa(clients), "-P", strconv.Itoa(pipeline), "-n", strconv.Itoa(n),
		"-r", "1000000000", "--csv",
		"SET", "otelcol-dedup:bench:__rand_int__", "AAAAAAAAAAAAAAAA", "NX", "PX", "600000",
	}
}

// ParseRedisBenchmarkCSV returns the requests per second of the last test
// of redis-benchmark --csv output: a header line, then one line per test,
// `"SET ...","454545.45","0.563",...`.
func ParseRedisBenchmarkCSV(r io.Reader) (float64, error) {
	recs, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark csv: %w", err)
	}
	if len(recs) < 2 || len(recs[0]) < 2 || recs[0][1] != "rps" || len(recs[len(recs)-1]) < 2 {
		return 0, errors.New(`redis-benchmark csv: want a "test","rps",... header and a result line`)
	}
	rps, err := strconv.ParseFloat(recs[len(recs)-1][1], 64)
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark csv: rps: %w", err)
	}
	return rps, nil
}

// Ceiling is one redis-benchmark run: what the server alone does with the
// cheapest command a dedup claim could be.
type Ceiling struct {
	Ops          int64
	OpsPerSecond float64
	CPUSeconds   float64 // the server's
}

// CPUPerOp is the server's CPU seconds per SET NX PX.
func (c Ceiling) CPUPerOp() float64 { return c.CPUSeconds / float64(c.Ops) }

// runRedisBenchmark runs redis-benchmark (bin) with RedisBenchmarkArgs
// against s and reads the server's CPU time around it.
func runRedisBenchmark(ctx context.Context, bin string, s *redistest.Server, clients, pipeline, n int) (Ceiling, error) {
	before, err := redisCounts(ctx, s)
	if err != nil {
		return Ceiling{}, err
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, RedisBenchmarkArgs(s.Port(), clients, pipeline, n)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Ceiling{}, fmt.Errorf("redis-benchmark: %w: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	rps, err := ParseRedisBenchmarkCSV(bytes.NewReader(out))
	if err != nil {
		return Ceiling{}, err
	}
	after, err := redisCounts(ctx, s)
	if err != nil {
		return Ceiling{}, err
	}
	return Ceiling{Ops: int64(n), OpsPerSecond: rps, CPUSeconds: after.Sub(before).CPUSeconds}, nil
}
