package e2e

// A gateway that consumes a Kafka topic with the real contrib kafka receiver,
// from a broker that speaks the Kafka wire protocol (franz-go's kfake, run
// inside the test process on a loopback port), through dedup configured as
// the README's Kafka gateway (examples/kafka-gateway.yaml), with the replays of a crash and of a
// rebalance.

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

const (
	kafkaTopic      = "app-logs"
	kafkaGroup      = "otelcol-dedup" // examples/kafka-gateway.yaml
	kafkaPartitions = 4
)

// kafkaGateway runs examples/kafka-gateway.yaml, the README's Kafka
// gateway, with test-only settings over it: the broker, topic and encoding,
// the test's Redis, the sink as the backend, a group session of 6 s (the
// brokers' minimum) for a dead member to leave soon, a lease short enough for a
// killed gateway's pending claims to end within seconds (the sink exporter
// does not retry), and the autocommit interval.
func kafkaGateway(t *testing.T, broker, encoding, redisAddr, autocommit string) *running {
	t.Helper()
	root, err := testkit.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return startCollector(t, []string{filepath.Join(root, "examples", "kafka-gateway.yaml")}, fmt.Sprintf(`
receivers:
  kafka:
    brokers: [%q]
    initial_offset: earliest
    session_timeout: 6s
    heartbeat_interval: 1s
    autocommit: %s
    logs: {topics: [%s], encoding: %s}
    error_backoff: {initial_interval: 100ms, max_interval: 1s}
processors:
  dedup/kafka:
    redis: {endpoints: [%q], lease: 5s}
service:
  pipelines:
    logs:
      exporters: [otlp_grpc/sink]
`, broker, autocommit, kafkaTopic, encoding, redisAddr))
}

// kafkaMessage is message i of the stream in encoding, and the body the
// receiver gives its record. Every fifth message repeats the one before in
// content, as real events do: the same line logged twice, byte for byte.
func kafkaMessage(t *testing.T, encoding string, i int) (value []byte, body string) {
	t.Helper()
	k := i
	if i%5 == 4 {
		k = i - 1
	}
	body = fmt.Sprintf("GET /api/orders/%d 200", k)
	switch encoding {
	case "text":
		return []byte(body), body
	case "otlp_proto":
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "orders")
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		// A timestamp with whole seconds: two repeats in content are
		// identical, timestamps included.
		ts := pcommon.NewTimestampFromTime(baseTime.Add(time.Duration(k/10) * time.Second))
		lr.SetTimestamp(ts)
		lr.SetObservedTimestamp(ts)
		lr.Body().SetStr(body)
		b, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		if err != nil {
			t.Fatal(err)
		}
		return b, body
	}
	t.Fatalf("test bug: encoding %q", encoding)
	return nil, ""
}

// startKafka starts a one-broker kfake cluster on a free loopback port with
// the topic, closed in the test's cleanup.
func startKafka(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(kafkaPartitions, kafkaTopic))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// kafkaClient is the test's producer and admin client.
func kafkaClient(t *testing.T, broker string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(broker),
		kgo.DefaultProduceTopic(kafkaTopic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()),
	)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func produce(t *testing.T, cl *kgo.Client, encoding string, lo, hi int, bodies map[string]int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	recs := make([]*kgo.Record, 0, hi-lo)
	for i := lo; i < hi; i++ {
		v, body := kafkaMessage(t, encoding, i)
		recs = append(recs, &kgo.Record{Value: v})
		bodies[body]++
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce messages %d-%d: %v", lo, hi-1, err)
	}
}

// groupCaughtUp reports whether the group has committed every partition's
// end offset: every message was consumed and its pipeline accepted it.
func groupCaughtUp(ctx context.Context, cl *kgo.Client) (bool, string, error) {
	lreq := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = kafkaTopic
	for p := range int32(kafkaPartitions) {
		lp := kmsg.NewListOffsetsRequestTopicPartition()
		lp.Partition = p
		lp.Timestamp = -1 // the end
		lt.Partitions = append(lt.Partitions, lp)
	}
	lreq.Topics = append(lreq.Topics, lt)
	lresp, err := lreq.RequestWith(ctx, cl)
	if err != nil {
		return false, "", err
	}
	ends := map[int32]int64{}
	for _, tp := range lresp.Topics {
		for _, p := range tp.Partitions {
			ends[p.Partition] = p.Offset
		}
	}
	freq := kmsg.NewPtrOffsetFetchRequest()
	freq.Group = kafkaGroup
	ft := kmsg.NewOffsetFetchRequestTopic()
	ft.Topic = kafkaTopic
	for p := range int32(kafkaPartitions) {
		ft.Partitions = append(ft.Partitions, p)
	}
	freq.Topics = append(freq.Topics, ft)
	fresp, err := freq.RequestWith(ctx, cl)
	if err != nil {
		return false, "", err
	}
	committed := map[int32]int64{}
	for _, tp := range fresp.Topics {
		for _, p := range tp.Partitions {
			committed[p.Partition] = p.Offset
		}
	}
	state := fmt.Sprintf("committed %v of ends %v", committed, ends)
	for p, end := range ends {
		if committed[p] != end {
			return false, state, nil
		}
	}
	return len(ends) == kafkaPartitions, state, nil
}

// waitCommitted waits until the sink holds as many records as Redis holds
// records whose claim is committed, and both have held still for
// 100 ms.
func waitCommitted(t *testing.T, rdb *redistest.Server, sink *testSink) {
	t.Helper()
	committed, since := -1, time.Now()
	testkit.WaitFor(t, "Redis's committed keys matching the sink's records", 2*time.Minute, func() bool {
		entries := dumpRedis(t, []*redistest.Server{rdb})
		status := claimStatus(entries)
		n := 0
		for _, e := range entries {
			if group, id, ok := record(e); ok && committedRE.MatchString(status[group+id]) {
				n++
			}
		}
		if n != sink.LogRecordCount() || n != committed {
			committed, since = n, time.Now()
		}
		return n == sink.LogRecordCount() && time.Since(since) >= 100*time.Millisecond
	}, func() string {
		return fmt.Sprintf("Redis holds %d committed keys, the sink %d records", committed, sink.LogRecordCount())
	})
}

// sinkBodies counts the bodies of the records the sinks hold.
func sinkBodies(sinks ...*testSink) (map[string]int, int) {
	got := map[string]int{}
	total := 0
	for _, s := range sinks {
		for _, ld := range s.Logs() {
			for _, rl := range ld.ResourceLogs().All() {
				for _, sl := range rl.ScopeLogs().All() {
					for _, lr := range sl.LogRecords().All() {
						got[lr.Body().AsString()]++
						total++
					}
				}
			}
		}
	}
	return got, total
}

// TestKafkaReplays: a producer writes n messages, one in five repeating the
// one before in content, to a topic of 4 partitions. Gateway A consumes them
// with a consumer group, committing nothing, and is killed with SIGKILL mid
// stream with an export in flight. The stream goes on; gateway B starts in
// the same group and replays from the last committed offsets (none: the
// start), and gateway C joins it, so the group rebalances. All share one
// Redis. Exactly the n messages are delivered, each once, with the repeats
// in content kept, and the duplicates dropped by B and C are exactly the
// messages they consumed beyond those they delivered.
func TestKafkaReplays(t *testing.T) {
	t.Parallel() // it mostly waits: see TestMain
	const n = 2000
	for _, encoding := range []string{"otlp_proto", "text"} {
		t.Run(encoding, func(t *testing.T) {
			t.Parallel()
			cluster := startKafka(t)
			broker := cluster.ListenAddrs()[0]
			rdb := redistest.Standalone(t)
			cl := kafkaClient(t, broker)
			produced := map[string]int{}
			produce(t, cl, encoding, 0, n/2, produced)

			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()

			// A: commits nothing (an hour between commits), killed mid
			// stream while an export is in flight.
			a := kafkaGateway(t, broker, encoding, rdb.Addr(), "{enable: true, interval: 1h}")
			testkit.WaitFor(t, "gateway A delivered n/8 messages", 2*time.Minute, func() bool { return a.sink.LogRecordCount() >= n/8 })
			a.sink.Hold()
			testkit.WaitFor(t, "an export of gateway A held at the sink", 2*time.Minute, func() bool { return a.sink.Holding() > 0 })
			// The claims of what A delivered are committed in Redis after
			// the sink's answer: kill A once they all are, and A stopped
			// delivering (its held export blocks its poll loop). A kill
			// between the sink's answer and the commit lets that message
			// through again once its lease ends (the README says so).
			waitCommitted(t, rdb, a.sink)
			a.col.Kill()
			relWaitAbandoned(t, a.sink)
			a.sink.Unhold()
			byA := a.sink.LogRecordCount()
			if ok, state, err := groupCaughtUp(ctx, cl); err != nil || ok {
				t.Fatalf("after the kill: %s (%v); want nothing committed", state, err)
			}

			// The stream goes on while B replays from the start.
			b := kafkaGateway(t, broker, encoding, rdb.Addr(), "{enable: true, interval: 1s}")
			produce(t, cl, encoding, n/2, n, produced)
			testkit.WaitFor(t, "gateway B delivered n/8 messages", 2*time.Minute, func() bool { return b.sink.LogRecordCount() >= n/8 })
			// C joins mid stream while B's exports are held: the group
			// rebalances, and the receiver cancels B's exports of the
			// partitions it loses, which the sink has not accepted.
			b.sink.Hold()
			testkit.WaitFor(t, "an export of gateway B held at the sink", 2*time.Minute, func() bool { return b.sink.Holding() > 0 })
			c := kafkaGateway(t, broker, encoding, rdb.Addr(), "{enable: true, interval: 1s}")
			testkit.WaitFor(t, "gateway C consuming", 2*time.Minute, func() bool {
				return c.scrape().Sum(metricRecords, sigLabels("dedup/kafka", "logs")) > 0
			})
			b.sink.Unhold()

			var state string
			testkit.WaitFor(t, "the group caught up", 2*time.Minute, func() bool {
				ok, s, err := groupCaughtUp(ctx, cl)
				if err != nil {
					t.Fatal(err)
				}
				state = s
				return ok
			}, func() string {
				_, delivered := sinkBodies(a.sink, b.sink, c.sink)
				return fmt.Sprintf("%s; %d of %d delivered", state, delivered, n)
			})

			l := func(kv ...string) Labels { return sigLabels("dedup/kafka", "logs", kv...) }
			scB, scC := b.scrape(), c.scrape()
			got, total := sinkBodies(a.sink, b.sink, c.sink)
			if total != n {
				t.Errorf("delivered %d messages, want exactly %d", total, n)
			}
			for body, want := range produced {
				if got[body] != want {
					t.Errorf("%q: delivered %d times, produced %d times", body, got[body], want)
				}
			}
			for body := range got {
				if produced[body] == 0 {
					t.Errorf("%q delivered, never produced", body)
				}
			}
			consumed := 0
			for _, sc := range []Scrape{scB, scC} {
				consumed += int(sc.Sum("otelcol_receiver_accepted_log_records", Labels{"receiver": "kafka"}))
			}

			byBC := b.sink.LogRecordCount() + c.sink.LogRecordCount()
			replayed := consumed - byBC
			unique := scB.Sum(metricRecords, l("outcome", "unique")) + scC.Sum(metricRecords, l("outcome", "unique"))
			dups := scB.Sum(metricRecords, l("outcome", "duplicate")) + scC.Sum(metricRecords, l("outcome", "duplicate"))
			if int(unique) != byBC {
				t.Errorf("B and C counted %g unique records and delivered %d", unique, byBC)
			}
			if int(dups) != replayed {
				t.Errorf("B and C dropped %g duplicates; they consumed %d messages and delivered %d: %d replayed", dups, consumed, byBC, replayed)
			}
			// B started from the start of every partition: it replayed at
			// least what A delivered.
			if replayed < byA {
				t.Errorf("%d messages replayed, fewer than the %d gateway A delivered before it was killed", replayed, byA)
			}
			repeats := 0
			for _, v := range produced {
				repeats += v - 1
			}
			t.Logf("%s: %d messages (%d repeats in content): A delivered %d before the kill; B and C consumed %d, delivered %d, dropped %g replays; the rebalance cancelled %d of B's held exports; %s",
				encoding, n, repeats, byA, consumed, byBC, dups, b.sink.Refused(), state)
		})
	}
}
