package e2e

// A file tailer without checkpoint storage re-reads its files after a
// restart: the real contrib filelog receiver in otelcol-agent, in front of
// otelcol-dedup gateways.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// filelogRecipe is the component README's filelog recipe (Identities by
// receiver): the line's position, which a re-read keeps and a repeated line
// does not share, and the line itself.
var filelogRecipe = logsGateway("dedup/filelog", `    window: 1h
    logs:
      key: ['attributes["log.file.path"]', 'attributes["log.file.record_offset"]', body]
`)

// filelogDefault is dedup with the default identity (the record's content).
var filelogDefault = logsGateway("dedup/filelog", "")

// filelogAgent reads path from its beginning, without storage (so a restart
// re-reads it), with the receiver's opt-in position attributes, and sends
// every line to both gateways.
func filelogAgent(path, recipe, dflt string) string {
	return agentToGateways("filelog", fmt.Sprintf(`    include: [%q]
    start_at: beginning
    poll_interval: 50ms
    include_file_path: true
    include_file_record_offset: true
`, path), recipe, dflt)
}

// fileLines are lines lo..hi-1 of the log: no timestamps, and every third
// line a health check that repeats, as real logs do.
func fileLines(lo, hi int) []string {
	var lines []string
	for i := lo; i < hi; i++ {
		if i%3 == 0 {
			lines = append(lines, fmt.Sprintf("GET /health 200 worker=%d", i%4))
		} else {
			lines = append(lines, fmt.Sprintf("GET /api/items/%d 200", i))
		}
	}
	return lines
}

func appendLines(t *testing.T, path string, lines []string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(strings.Join(lines, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestFilelogRereads: the agent reads a timestamp-less file of m lines,
// some repeating, and is killed with SIGKILL; the file grows by k lines and
// the agent, started again without storage, reads it all again. With the
// README's filelog recipe each of the m+k lines is delivered once, repeats
// included; with the default identity the re-read lines are new (a re-read
// gets a new observed time, which joins a timestamp-less line's identity),
// and every re-read line is delivered again.
func TestFilelogRereads(t *testing.T) {
	const m, k = 120, 60
	path := filepath.Join(t.TempDir(), "app.log")
	appendLines(t, path, fileLines(0, m))

	recipe := startCollector(t, nil, filelogRecipe)
	dflt := startCollector(t, nil, filelogDefault)
	agentYAML := filelogAgent(path, recipe.ports.OTLPGRPC, dflt.ports.OTLPGRPC)
	seen := func(name string, r *running, n int) {
		t.Helper()
		sc := waitScrape(t, r, name+" gateway saw every record", func(sc Scrape) bool { return sc.Sum(metricRecords, sigLabels("dedup/filelog", "logs")) >= float64(n) })
		if got := sc.Sum(metricRecords, sigLabels("dedup/filelog", "logs")); got < float64(n) {
			t.Fatalf("%s gateway: saw %g records, waiting for %d; its sink holds %d", name, got, n, r.sink.LogRecordCount())
		}
	}

	agent := startAgent(t, agentYAML)
	// Kill the agent once both gateways have settled its requests: an
	// agent killed while a gateway exports its request cancels that
	// export, and if the backend had already accepted it, the keys are
	// released and the re-read is delivered again.
	seen("recipe", recipe, m)
	seen("default", dflt, m)
	for _, r := range []*running{recipe, dflt} {
		if n := r.sink.LogRecordCount(); n != m {
			t.Fatalf("first read: %d lines delivered, want %d", n, m)
		}
	}
	agent.col.Kill()
	appendLines(t, path, fileLines(m, m+k))
	startAgent(t, agentYAML)
	// The second read: every line of the file again.
	seen("recipe", recipe, m+m+k)
	seen("default", dflt, m+m+k)
	recipeScrape, dfltScrape := recipe.scrape(), dflt.scrape()
	// Stopping flushes the gateways: what the sinks hold now is final.
	recipe.stop()
	dflt.stop()

	want := map[string]int{}
	for _, l := range fileLines(0, m+k) {
		want[l]++
	}
	got, total := sinkBodies(recipe.sink)
	if total != m+k {
		t.Errorf("recipe: %d lines delivered, want %d", total, m+k)
	}
	for l, n := range want {
		if got[l] != n {
			t.Errorf("recipe: %q delivered %d times, written %d times", l, got[l], n)
		}
	}
	wantMetric(t, recipeScrape, metricRecords, sigLabels("dedup/filelog", "logs", "outcome", "duplicate"), m)

	_, dTotal := sinkBodies(dflt.sink)
	if dTotal != m+m+k {
		t.Errorf("default identity: %d lines delivered, want %d (every re-read line again)", dTotal, m+m+k)
	}
	t.Logf("default identity: %v", dfltScrape.Find(metricRecords, nil))
	t.Logf("%d lines written, %d re-read: the recipe delivered %d, the default identity %d", m+k, m, total, dTotal)
}
