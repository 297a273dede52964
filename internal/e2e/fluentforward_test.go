package e2e

// A Fluent Forward client's re-sent chunk, through the real contrib
// fluentforward receiver in otelcol-agent, in front of an otelcol-dedup
// gateway on the default identity.

import (
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"time"
)

var fluentDefault = logsGateway("dedup/fluent", "")

func fluentAgent(listen, gateway string) string {
	return agentToGateways("fluentforward", fmt.Sprintf("    endpoint: %q\n", listen), gateway)
}

// fluentEvent is one event of the Forward protocol's message mode,
// [tag, time, {"log": text}], encoded in MessagePack. With nanos >= 0 the
// time is an EventTime (seconds and nanoseconds), else integer seconds.
func fluentEvent(sec uint32, nanos int, text string) []byte {
	b := []byte{0x93}                    // an array of 3
	b = append(b, 0xa0|byte(len("app"))) // fixstr tag
	b = append(b, "app"...)
	if nanos >= 0 {
		b = append(b, 0xd7, 0x00) // fixext 8, type 0: EventTime
		b = binary.BigEndian.AppendUint32(b, sec)
		b = binary.BigEndian.AppendUint32(b, uint32(nanos))
	} else {
		b = append(b, 0xce) // uint32
		b = binary.BigEndian.AppendUint32(b, sec)
	}
	b = append(b, 0x81, 0xa3, 'l', 'o', 'g') // a map of 1: "log"
	b = append(b, 0xd9, byte(len(text)))     // str8
	return append(b, text...)
}

// fluentEvents are events lo..hi-1, each at its own nanosecond; every fifth
// one says the same as the one before, as real logs do.
func fluentEvents(lo, hi int) (events [][]byte, texts []string) {
	base := uint32(time.Date(2026, 11, 26, 6, 0, 0, 0, time.UTC).Unix())
	for i := lo; i < hi; i++ {
		text := fmt.Sprintf("GET /api/items/%d 200", i)
		if i%5 == 4 {
			text = fmt.Sprintf("GET /api/items/%d 200", i-1)
		}
		events = append(events, fluentEvent(base+uint32(i), 123456789, text))
		texts = append(texts, text)
	}
	return events, texts
}

func fluentSend(t *testing.T, addr string, events [][]byte) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, opTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, e := range events {
		if _, err := conn.Write(e); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFluentForwardResends: a forwarder sends n events over one connection
// to the agent's fluentforward receiver, then re-sends the last k byte for
// byte over a new connection, as fluent-bit does with a chunk whose
// acknowledgement it lost. The default identity (the content) delivers the
// n events once each, repeated texts at other times included. Two
// identical events with integer-second times are identical in pdata: one
// is kept, as the identities-by-receiver table says.
func TestFluentForwardResends(t *testing.T) {
	const n, k = 30, 10
	gw := startCollector(t, nil, fluentDefault)
	listen := startAgent(t, fluentAgent(ListenExtra, gw.ports.OTLPGRPC)).ports.Extra

	seen := func(want int) {
		t.Helper()
		l := sigLabels("dedup/fluent", "logs")
		sc := waitScrape(t, gw, "the gateway saw every record", func(sc Scrape) bool { return sc.Sum(metricRecords, l) >= float64(want) })
		if got := sc.Sum(metricRecords, l); got != float64(want) {
			t.Fatalf("the gateway saw %g records, want %d", got, want)
		}
	}
	events, texts := fluentEvents(0, n)
	fluentSend(t, listen, events)
	seen(n)
	fluentSend(t, listen, events[n-k:])
	seen(n + k)
	second := uint32(time.Date(2026, 11, 26, 7, 0, 0, 0, time.UTC).Unix())
	fluentSend(t, listen, [][]byte{fluentEvent(second, -1, "worker started"), fluentEvent(second, -1, "worker started")})
	seen(n + k + 2)
	gw.stop()

	want := map[string]int{"worker started": 1}
	for _, text := range texts {
		want[text]++
	}
	got, total := sinkBodies(gw.sink)
	if total != n+1 {
		t.Errorf("%d events delivered, want %d", total, n+1)
	}
	for text, c := range want {
		if got[text] != c {
			t.Errorf("%q delivered %d times, want %d", text, got[text], c)
		}
	}
}
