package e2e

// A syslog client's re-send over a new connection, through the real contrib
// syslog receiver in otelcol-agent, in front of otelcol-dedup gateways.

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// syslogRecipe is the component README's syslog recipe (Identities by
// receiver): with add_attributes, the peer's port tells connections apart,
// not messages.
var syslogRecipe = logsGateway("dedup/syslog", `    logs:
      ignore: ['attributes["net.peer.port"]']
`)

var syslogDefault = logsGateway("dedup/syslog", "")

func syslogAgent(listen, recipe, dflt string) string {
	return agentToGateways("syslog", fmt.Sprintf(`    protocol: rfc5424
    tcp:
      listen_address: %q
      add_attributes: true
`, listen), recipe, dflt)
}

// syslogLines are RFC 5424 messages lo..hi-1, with microsecond timestamps
// (never a whole millisecond); every fourth message says the same as the one
// before, at its own time, as real logs do.
func syslogLines(lo, hi int) []string {
	var lines []string
	for i := lo; i < hi; i++ {
		ts := baseTime.Add(time.Duration(i)*time.Second + 123457*time.Microsecond)
		msg := fmt.Sprintf("session %d opened", i)
		if i%4 == 3 {
			msg = fmt.Sprintf("session %d opened", i-1)
		}
		lines = append(lines, fmt.Sprintf("<38>1 %s web-1 sshd 4242 - - %s", ts.Format("2006-01-02T15:04:05.000000Z07:00"), msg))
	}
	return lines
}

func syslogSend(t *testing.T, addr string, lines []string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, opTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
		t.Fatal(err)
	}
}

// TestSyslogResends: a client sends n messages over one TCP connection to
// the agent's syslog receiver (add_attributes on), then re-sends the last
// k over a new connection, as a client does whose connection broke before
// it knew what arrived. With the README's syslog recipe the n messages are
// delivered once each, repeated texts included; with the default identity
// the re-sent ones are new (their net.peer.port differs).
func TestSyslogResends(t *testing.T) {
	const n, k = 40, 10
	recipe := startCollector(t, nil, syslogRecipe)
	dflt := startCollector(t, nil, syslogDefault)
	listen := startAgent(t, syslogAgent(ListenExtra, recipe.ports.OTLPGRPC, dflt.ports.OTLPGRPC)).ports.Extra

	seen := func(name string, r *running, want int) {
		t.Helper()
		l := sigLabels("dedup/syslog", "logs")
		sc := waitScrape(t, r, name+" gateway saw every record", func(sc Scrape) bool { return sc.Sum(metricRecords, l) >= float64(want) })
		if got := sc.Sum(metricRecords, l); got < float64(want) {
			t.Fatalf("%s gateway: saw %g records, waiting for %d", name, got, want)
		}
	}
	syslogSend(t, listen, syslogLines(0, n))
	seen("recipe", recipe, n)
	seen("default", dflt, n)
	syslogSend(t, listen, syslogLines(n-k, n))
	seen("recipe", recipe, n+k)
	seen("default", dflt, n+k)
	recipe.stop()
	dflt.stop()

	want := map[string]int{}
	for _, l := range syslogLines(0, n) {
		want[l]++ // the receiver keeps the line as the body
	}
	got, total := sinkBodies(recipe.sink)
	if total != n {
		t.Errorf("recipe: %d messages delivered, want %d", total, n)
	}
	for msg, c := range want {
		if got[msg] != c {
			t.Errorf("recipe: %q delivered %d times, want %d", msg, got[msg], c)
		}
	}
	if _, dTotal := sinkBodies(dflt.sink); dTotal != n+k {
		t.Errorf("default identity: %d messages delivered, want %d (every re-send again)", dTotal, n+k)
	}
}
