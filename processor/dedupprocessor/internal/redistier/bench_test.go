package redistier

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// The benchmarks push batches of benchBatch unique digests from 4 goroutines
// (2 per core here), the shape of `redis-benchmark -c 4 -P 1000`, each
// against a fresh server, and report unique records/s, the Redis memory and
// the Redis CPU time each record costs. BenchmarkRedisBenchmark runs
// redis-benchmark itself for the baseline.
//
// Their figures, and what they say about the tier's design (one script
// call per batch against pipelined SET NX, and a lease per key), are in
// BENCHMARKS.md, "The shared tier on its own".
const benchBatch = 1000

var benchSeq atomic.Uint64

// benchDigests fills ds with digests never used before.
func benchDigests(ds []digest.Digest) {
	n := benchSeq.Add(uint64(len(ds))) - uint64(len(ds))
	for i := range ds {
		// Uniform in every bit, as a hash is (Hi picks the group, Lo the
		// shard); splitmix is a bijection, so Hi never repeats.
		ds[i] = digest.Digest{Hi: splitmix(n + uint64(i)), Lo: splitmix(^(n + uint64(i)))}
	}
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func BenchmarkClaimCommit(b *testing.B) {
	b.Run("tier", func(b *testing.B) {
		srv := redistest.Standalone(b)
		tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: 10 * time.Minute, Timeout: 5 * time.Second})
		runBatches(b, srv.Client(), func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
			tok := testToken()
			if err := tr.claimBools(ctx, tok, ds, claimed); err != nil {
				return err
			}
			return tr.Commit(ctx, tok, ds)
		})
	})

	// One plain command per key, no commit: the ceiling for any design that
	// writes each key once, through the same Go client.
	b.Run("set-nx-px", func(b *testing.B) {
		srv := redistest.Standalone(b)
		c := srv.Client()
		runBatches(b, c, func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
			tok := testToken()
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, d := range ds {
					p.SetNX(ctx, benchKey(d), tok, 30*time.Second)
				}
				return nil
			})
			for i, cmd := range cmds {
				claimed[i] = cmd.(*redis.BoolCmd).Val()
			}
			return err
		})
	})

	// The per-key design: claim with SET NX PX lease, commit with a script
	// that extends every key still holding the token to the window.
	b.Run("per-key-commit", func(b *testing.B) {
		srv := redistest.Standalone(b)
		c := srv.Client()
		commitScript := redis.NewScript(`
for i = 1, #KEYS do
  if redis.call('GET', KEYS[i]) == ARGV[1] then redis.call('PEXPIRE', KEYS[i], ARGV[2]) end
end
return 0`)
		runBatches(b, c, func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
			tok := testToken()
			keys := make([]string, len(ds))
			for i, d := range ds {
				keys[i] = benchKey(d)
			}
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.SetNX(ctx, k, tok, 30*time.Second)
				}
				return nil
			})
			if err != nil {
				return err
			}
			for i, cmd := range cmds {
				claimed[i] = cmd.(*redis.BoolCmd).Val()
			}
			return commitScript.Run(ctx, c, keys, tok, 600000).Err()
		})
	})
}

// BenchmarkClaimCommitTags is the cost of Options.ClusterSlots: claim +
// commit with tags hash-tagged groups (one script call, one commit command
// and one status key per group a batch touches), on one server so that only
// the group count changes, at batches of 1000 and 10000. More tags let more
// masters hold dedup keys, at this price for every batch.
func BenchmarkClaimCommitTags(b *testing.B) {
	for _, batch := range []int{1000, 10000} {
		for _, tags := range []int{0, defaultTags, 100, 300} {
			b.Run(fmt.Sprintf("batch=%d/tags=%d", batch, tags), func(b *testing.B) {
				srv := redistest.Standalone(b)
				tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: 10 * time.Minute, Timeout: 5 * time.Second})
				tr.conn.Load().layout.Store(newLayout("otelcol-dedup:", Shape{Version: layoutVersion, Tags: tags}))
				runBatchesOf(b, batch, srv.Client(), func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
					tok := testToken()
					if err := tr.claimBools(ctx, tok, ds, claimed); err != nil {
						return err
					}
					return tr.Commit(ctx, tok, ds)
				})
			})
		}
	}
}

func BenchmarkClaimCommitCluster(b *testing.B) {
	cl := redistest.Cluster(b, 3)
	cc := cl.Client()
	defer cc.Close()
	tr := newTier(b, Options{Endpoints: cl.Addrs(), KeyPrefix: "otelcol-dedup:", Window: 10 * time.Minute, Timeout: 5 * time.Second})
	cpuBefore := clusterCPU(b, cl)
	defer func() {
		b.ReportMetric(float64(clusterCPU(b, cl)-cpuBefore)/float64(b.N*benchBatch), "redis-cpu-ns/record")
	}()
	runBatches(b, nil, func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
		tok := testToken()
		if err := tr.claimBools(ctx, tok, ds, claimed); err != nil {
			return err
		}
		return tr.Commit(ctx, tok, ds)
	})
}

func benchKey(d digest.Digest) string {
	b := d.Bytes()
	return "otelcol-dedup:" + string(b[:])
}

// runBatches calls op with batches of benchBatch fresh digests from 4
// goroutines and reports records/s; with a client it also reports Redis
// bytes per record.
func runBatches(b *testing.B, c *redis.Client, op func(context.Context, []digest.Digest, []bool) error) {
	runBatchesOf(b, benchBatch, c, op)
}

// runBatchesOf is runBatches with batches of size digests.
func runBatchesOf(b *testing.B, size int, c *redis.Client, op func(context.Context, []digest.Digest, []bool) error) {
	ctx := context.Background()
	before, cpuBefore, clientBefore := usedMemory(b, c), serverCPU(b, c), processCPU(b)
	b.ReportAllocs()
	b.SetParallelism(2)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ds := make([]digest.Digest, size)
		claimed := make([]bool, size)
		for pb.Next() {
			benchDigests(ds)
			if err := op(ctx, ds, claimed); err != nil {
				b.Error(err)
				return
			}
			for i, ok := range claimed {
				if !ok {
					b.Errorf("fresh digest %d not claimed", i)
					return
				}
			}
		}
	})
	b.StopTimer()
	records := float64(b.N * size)
	b.ReportMetric(records/b.Elapsed().Seconds(), "records/s")
	// The client's CPU: this process's (user and system), the tier's calls
	// and the batches' digests.
	b.ReportMetric(float64(processCPU(b)-clientBefore)/records, "client-cpu-ns/record")
	if c != nil {
		b.ReportMetric(float64(usedMemory(b, c)-before)/records, "redis-B/record")
		b.ReportMetric(float64(serverCPU(b, c)-cpuBefore)/records, "redis-cpu-ns/record")
	}
}

// processCPU returns this process's CPU time (user + system).
func processCPU(b testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clusterCPU returns the CPU time of all the Cluster's masters.
func clusterCPU(b *testing.B, cl *redistest.ClusterServers) time.Duration {
	var total time.Duration
	for _, n := range cl.Nodes {
		total += serverCPU(b, n.Client())
	}
	return total
}

// serverCPU returns the server's CPU time (user + system) in nanoseconds.
func serverCPU(b testing.TB, c *redis.Client) time.Duration {
	if c == nil {
		return 0
	}
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total float64
	for _, f := range []string{"used_cpu_sys", "used_cpu_user"} {
		m := regexp.MustCompile(f + `:([0-9.]+)`).FindStringSubmatch(info)
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return time.Duration(total * float64(time.Second))
}

func usedMemory(b *testing.B, c *redis.Client) int64 {
	if c == nil {
		return 0
	}
	info, err := c.Info(context.Background(), "memory").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := regexp.MustCompile(`used_memory:(\d+)`).FindStringSubmatch(info)
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// BenchmarkRedisBenchmark is the baseline: redis-benchmark's pipelined
// SET key v NX PX with 4 clients and 1000 commands per round trip (b.N*1000
// commands, like b.N batches above), against a fresh server or Cluster.
// records/s is redis-benchmark's own requests per second.
func BenchmarkRedisBenchmark(b *testing.B) {
	b.Run("standalone", func(b *testing.B) {
		srv := redistest.Standalone(b)
		c := srv.Client()
		before, cpuBefore := usedMemory(b, c), serverCPU(b, c)
		b.ResetTimer()
		runRedisBenchmark(b, "otelcol-dedup:__rand_int__", "-p", strconv.Itoa(srv.Port()))
		records := float64(b.N * benchBatch)
		b.ReportMetric(float64(usedMemory(b, c)-before)/records, "redis-B/record")
		b.ReportMetric(float64(serverCPU(b, c)-cpuBefore)/records, "redis-cpu-ns/record")
	})
	b.Run("cluster", func(b *testing.B) {
		cl := redistest.Cluster(b, 3)
		cpuBefore := clusterCPU(b, cl)
		b.ResetTimer()
		// In cluster mode redis-benchmark replaces {tag} with a tag of the
		// node each client talks to.
		runRedisBenchmark(b, "otelcol-dedup:{tag}:__rand_int__", "-p", strconv.Itoa(cl.Nodes[0].Port()), "--cluster")
		b.ReportMetric(float64(clusterCPU(b, cl)-cpuBefore)/float64(b.N*benchBatch), "redis-cpu-ns/record")
	})
}

func runRedisBenchmark(b *testing.B, key string, args ...string) {
	bin := redistest.LookPath(b, "redis-benchmark")
	args = append(append([]string{"-h", "127.0.0.1"}, args...),
		"-c", "4", "-P", "1000", "-n", strconv.Itoa(b.N*benchBatch), "-r", "1000000000", "--csv",
		"SET", key, "AAAAAAAAAAAAAAAA", "NX", "PX", "600000")
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	b.StopTimer()
	// --csv: a header line, then "SET ...","<rps>",...
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fields := strings.Split(lines[len(lines)-1], ",")
	if len(fields) < 2 {
		b.Fatalf("redis-benchmark output: %s", out)
	}
	rps, err := strconv.ParseFloat(strings.Trim(fields[1], `"`), 64)
	if err != nil {
		b.Fatalf("redis-benchmark output %q: %v", out, err)
	}
	b.ReportMetric(rps, "records/s")
}

// BenchmarkClientPath is what the tier's client costs alone: one goroutine
// claims and commits batches of benchBatch fresh digests, one after the
// other, against a real redis-server. client-cpu-ns/record is this
// process's CPU (user and system) per record; allocs/op are per batch.
func BenchmarkClientPath(b *testing.B) {
	srv := redistest.Standalone(b)
	tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: 10 * time.Minute, Timeout: 5 * time.Second})
	ctx := context.Background()
	ds := make([]digest.Digest, benchBatch)
	claimed := make([]bool, benchBatch)
	op := tierClaimCommit(tr)
	benchDigests(ds)
	if err := op(ctx, ds, claimed); err != nil { // loads the scripts
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU(b)
	for range b.N {
		benchDigests(ds)
		if err := op(ctx, ds, claimed); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(processCPU(b)-cpu)/float64(b.N*benchBatch), "client-cpu-ns/record")
}
