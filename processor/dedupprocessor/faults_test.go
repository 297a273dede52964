package dedupprocessor

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/faultproxy"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestFaults drives real dedup processors, their real shared tier, scripts
// and background writer, through faults injected between them and a real
// Redis (standalone, and a 3-master Cluster), and checks the promises that
// the faults must not break:
//
//   - every record of an acknowledged request was delivered;
//   - every record delivered twice had a cause the README lists (Redis lost
//     its data, Redis failed under on_error: pass, a claim's lease ran out
//     while Redis could not be reached, a collector was killed between its
//     export and its commit), and the metric that counts that cause counted
//     it;
//   - every refused request had an injected cause: its exporter failed,
//     its collector died or shut down, Redis failed under on_error: refuse,
//     or another request was delivering one of its records (a stall), which
//     a claim holds no longer than its export, or than the lease when its
//     collector died;
//   - the unchecked and lost counters count only under faults that explain
//     them;
//   - a record committed is remembered for the window of the collector
//     that committed it: a copy is delivered again only once that window
//     has passed since its export ended, whatever the window of the
//     collector the copy reached;
//   - every record Redis holds at the end is in the hash its group's shape
//     names for it, and each group is split for the records it counts; a
//     collector whose redis.cluster_slots differs from the layout's says so.
//
// Besides the faults, the seed may add scenarios (faultsinject_test.go's
// faultScenarios): collectors restarted with a longer, then a shorter
// window (and another cluster_slots) than the others', and requests sent
// again within their records' windows; bursts of thousands of new records,
// so that shards split while claims race (a burst's load counts as a slow
// Redis: its calls may fail, never let a copy through under refuse);
// exports lasting one to three windows, held by their claims' renewals
// alone; and scripts failing, as Redis refuses writes (maxmemory) and then
// fails scripts after their writes. A run whose scenarios need the window
// to pass has a window of seconds.
//
// Each run is reproducible from its seed as far as a real network and
// goroutine timing allow: the requests, the exporters' delays and failures,
// the collectors each attempt goes to and the fault schedule all come from
// it. A failed run logs its timeline. faultsload_test.go is the collectors,
// senders and exporters; faultsinject_test.go the faults;
// faultscheck_test.go the promises.
//
// -faults.seed=1,2 runs those seeds; -faults.duration=10m runs random seeds
// for that long (make soak) and prints each failed seed (FAULTS_SEED and
// FAULTS_DURATION do the same); -faults.dump (FAULTS_DUMP=1) logs every try
// and export.
func TestFaults(t *testing.T) {
	seeds, soak := faultSeeds(t)
	policies := []ErrorPolicy{ErrorPass, ErrorRefuse}
	for _, topo := range []string{"standalone", "cluster"} {
		t.Run(topo, func(t *testing.T) {
			env := &faultEnv{topology: topo}
			if topo == "standalone" {
				env.server = redistest.Standalone(t)
				env.client = env.server.Client()
			} else {
				env.cluster = faultproxy.NewCluster(t, redistest.ClusterConfig{Masters: 3})
				client := env.cluster.Client() // through the proxies, whose rules pass it by
				t.Cleanup(func() { _ = client.Close() })
				env.client = client
			}
			if soak == 0 {
				for _, signal := range []string{"logs", "metrics"} {
					for _, seed := range seeds[signal] {
						for _, p := range policies {
							runFaultsSeed(t, env, signal, seed, p)
						}
					}
				}
				return
			}
			// Half the soak on each topology.
			until := time.Now().Add(soak / 2)
			for time.Now().Before(until) {
				seed := rand.Uint64() % 1_000_000_000
				for _, signal := range []string{"logs", "metrics"} {
					for _, p := range policies {
						runFaultsSeed(t, env, signal, seed, p)
					}
				}
			}
		})
	}
}

// defaultFaultSeeds are the seeds make test runs, per signal, on each
// topology under each on_error. Their scenarios (planScenarios), the same
// on both topologies: logs seed 1 and metrics seed 1 change settings
// mid-run (on a Cluster, cluster_slots too) and make exports longer than
// the window; logs seed 32 bursts and fails scripts. Seed 32 replaced seed 2
// (whose only scenario is long exports) for its faults besides: a restart,
// a shutdown, a cut and a late claim among them.
var defaultFaultSeeds = map[string][]uint64{"logs": {1, 32}, "metrics": {1}}

var (
	faultsSeedFlag     = flag.String("faults.seed", "", "TestFaults: comma-separated seeds to run (default: the seeds make test runs)")
	faultsDurationFlag = flag.Duration("faults.duration", 0, "TestFaults: run random seeds for this long (make soak)")
	faultsDumpFlag     = flag.Bool("faults.dump", false, "TestFaults: log every try and export of each run")
)

// faultSeeds returns the seeds to run per signal, or the soak duration.
func faultSeeds(t *testing.T) (map[string][]uint64, time.Duration) {
	seedList, soak := *faultsSeedFlag, *faultsDurationFlag
	if v := os.Getenv("FAULTS_SEED"); seedList == "" && v != "" {
		seedList = v
	}
	if v := os.Getenv("FAULTS_DURATION"); soak == 0 && v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("FAULTS_DURATION=%q: %v", v, err)
		}
		soak = d
	}
	if seedList == "" {
		return defaultFaultSeeds, soak
	}
	var seeds []uint64
	for _, s := range strings.Split(seedList, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
		if err != nil {
			t.Fatalf("faults seed %q: %v", s, err)
		}
		seeds = append(seeds, n)
	}
	return map[string][]uint64{"logs": seeds, "metrics": seeds}, 0
}

// runFaultsSeed runs one seed of one signal under one on_error as a
// subtest, and prints the seed if it fails, so that a soak's output names
// every failed seed.
func runFaultsSeed(t *testing.T, env *faultEnv, signal string, seed uint64, policy ErrorPolicy) {
	t.Run(fmt.Sprintf("%s/seed=%d/%s", signal, seed, policy), func(t *testing.T) {
		t.Cleanup(func() {
			if t.Failed() {
				fmt.Printf("faults: FAILED seed %d (%s, %s, on_error: %s): rerun in processor/dedupprocessor with go test -race -run 'TestFaults/%s/%s/seed=%d/%s' . -faults.seed=%d\n",
					seed, env.topology, signal, policy, env.topology, signal, seed, policy, seed)
			}
		})
		r := newFaultRun(t, env, signal, seed, policy)
		r.run()
		r.check()
	})
}
