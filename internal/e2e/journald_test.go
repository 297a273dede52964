package e2e

// A journal reader without cursor storage re-reads the journal after a
// restart: the real contrib journald receiver in otelcol-agent (it runs
// journalctl) reading real journal files, written by systemd-journal-remote,
// in front of otelcol-dedup gateways.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// EnvJournalRemote names the systemd-journal-remote the tests write journal
// files with; by default bin/systemd-journal-remote, which `make deps`
// extracts from Debian's package (scripts/ensure-journal-remote.sh).
const EnvJournalRemote = "SYSTEMD_JOURNAL_REMOTE"

// journaldRecipe is the component README's journald recipe (Identities by
// receiver): the entry's cursor, which a re-read keeps and no other entry
// shares.
var journaldRecipe = logsGateway("dedup/journald", `    window: 1h
    logs:
      key: ['body["__CURSOR"]']
`)

// journaldDefault is dedup with the default identity (the record's content).
var journaldDefault = logsGateway("dedup/journald", "")

// journaldAgent reads the journal files of dir from the beginning, without
// storage (so a restart re-reads them), and sends every entry to both
// gateways.
func journaldAgent(dir, recipe, dflt string) string {
	return agentToGateways("journald", fmt.Sprintf(`    directory: %q
    start_at: beginning
`, dir), recipe, dflt)
}

// journalEntry i of the test's journal: the messages of fileLines (every
// third a health check that repeats), at i ms past baseTime plus a
// sub-millisecond part, as journald's microsecond clock gives, except every
// tenth entry, which falls on a whole millisecond (one in a thousand does in
// a real journal).
func journalEntry(i int) (message string, realtimeUS int64) {
	frac := int64(0)
	if i%10 != 0 {
		frac = 1 + int64(i*37%998)
	}
	return fileLines(i, i+1)[0], baseTime.UnixMicro() + int64(i)*1000 + frac
}

// wholeMillisecond reports whether entry i's timestamp is a whole millisecond.
func wholeMillisecond(i int) bool {
	_, us := journalEntry(i)
	return us%1000 == 0
}

// journalRemote returns the systemd-journal-remote to write journal files
// with, or fails the test.
func journalRemote(t *testing.T) string {
	t.Helper()
	p := os.Getenv(EnvJournalRemote)
	if p == "" {
		root, err := testkit.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.Join(root, "bin", "systemd-journal-remote")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("systemd-journal-remote not found (%v): run `make deps` or set %s", err, EnvJournalRemote)
	}
	return p
}

// appendJournal writes entries lo..hi-1 to the journal file path (created,
// or grown), from the journal export format, and checks with journalctl that
// the file then holds exactly want entries.
func appendJournal(t *testing.T, path string, lo, hi, want int) {
	t.Helper()
	var export bytes.Buffer
	for i := lo; i < hi; i++ {
		msg, us := journalEntry(i)
		fmt.Fprintf(&export, "__REALTIME_TIMESTAMP=%d\n__MONOTONIC_TIMESTAMP=%d\n_BOOT_ID=8d9c6f0e3b2a4c1d9e7f6a5b4c3d2e1f\n_HOSTNAME=e2e\nSYSLOG_IDENTIFIER=app\nPRIORITY=6\nMESSAGE=%s\n\n",
			us, us-baseTime.UnixMicro()+1_000_000, msg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, journalRemote(t), "--output="+path, "-")
	cmd.Stdin = &export
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemd-journal-remote: %v\n%s", err, out)
	}
	out, err := exec.CommandContext(ctx, "journalctl", "--file="+path, "--output=json").Output()
	if err != nil {
		t.Fatalf("journalctl --file %s: %v", path, err)
	}
	if n := bytes.Count(out, []byte("\n")); n != want {
		t.Fatalf("journal file holds %d entries, want %d", n, want)
	}
}

// childProcesses returns the PIDs of parent's children named comm.
func childProcesses(t *testing.T, parent int, comm string) []int {
	t.Helper()
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		name, _, ppid, ok := procStat(pid)
		if ok && ppid == parent && name == comm {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStat reads a process's name, state and parent from /proc/PID/stat;
// ok is false when there is no such process.
func procStat(pid int) (comm string, state byte, ppid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", 0, 0, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", 0, 0, false
	}
	f := strings.Fields(s[end+1:])
	if len(f) < 2 {
		return "", 0, 0, false
	}
	ppid, err = strconv.Atoi(f[1])
	return s[open+1 : end], f[0][0], ppid, err == nil
}

// killProcesses SIGKILLs each of pids still running as comm and waits,
// bounded, until each has exited (gone, or a zombie left to its new parent).
func killProcesses(t *testing.T, comm string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		testkit.WaitFor(t, fmt.Sprintf("process %d gone after SIGKILL", pid), opTimeout, func() bool {
			name, state, _, ok := procStat(pid)
			if !ok || state == 'Z' || name != comm {
				return true
			}
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Fatalf("kill %d: %v", pid, err)
			}
			return false
		})
	}
}

// journaldRecord is what a sink received of one journal entry.
type journaldRecord struct {
	message, cursor string
	timeUS          int64
}

func journaldRecords(t *testing.T, s *testSink) []journaldRecord {
	t.Helper()
	var recs []journaldRecord
	for _, ld := range s.Logs() {
		for _, rl := range ld.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					body := lr.Body().Map()
					msg, okM := body.Get("MESSAGE")
					cur, okC := body.Get("__CURSOR")
					if !okM || !okC {
						t.Fatalf("a record without MESSAGE or __CURSOR in its body: %v", lr.Body().AsRaw())
					}
					recs = append(recs, journaldRecord{msg.AsString(), cur.AsString(), lr.Timestamp().AsTime().UnixMicro()})
				}
			}
		}
	}
	return recs
}

// TestJournaldRereads: the agent reads a journal file of m entries, some
// repeating in their message, and is killed with SIGKILL; the file grows by
// k entries and the agent, started again without storage, reads it all
// again. With the README's journald recipe (the cursor) each of the m+k
// entries is delivered once, repeats included. With the default identity a
// re-read entry is caught by its microsecond timestamp, except one whose
// timestamp is a whole millisecond: then the observed time joins its
// identity, and a re-read gets a new one, so it is delivered again.
func TestJournaldRereads(t *testing.T) {
	const m, k = 120, 60
	if _, err := exec.LookPath("journalctl"); err != nil {
		t.Fatalf("the journald receiver runs journalctl: %v (Debian package systemd)", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "app.journal")
	appendJournal(t, path, 0, m, m)

	// The agent's journalctl, which a SIGKILL of the agent leaves running:
	// stopped by PID, after the agents (cleanups run last in, first out).
	var readers []int
	t.Cleanup(func() { killProcesses(t, "journalctl", readers) })

	recipe := startCollector(t, nil, journaldRecipe)
	dflt := startCollector(t, nil, journaldDefault)
	agentYAML := journaldAgent(dir, recipe.ports.OTLPGRPC, dflt.ports.OTLPGRPC)
	labels := sigLabels("dedup/journald", "logs")
	seen := func(name string, r *running, n int) {
		t.Helper()
		sc := waitScrape(t, r, name+" gateway saw every record", func(sc Scrape) bool { return sc.Sum(metricRecords, labels) >= float64(n) })
		if got := sc.Sum(metricRecords, labels); got < float64(n) {
			t.Fatalf("%s gateway: saw %g records, waiting for %d; its sink holds %d", name, got, n, r.sink.LogRecordCount())
		}
	}
	journalctl := func(agent *running) {
		t.Helper()
		readers = childProcesses(t, agent.col.PID, "journalctl")
		if len(readers) == 0 {
			t.Fatalf("no journalctl child of the agent (pid %d)", agent.col.PID)
		}
	}

	agent := startAgent(t, agentYAML)
	// Kill the agent once both gateways have settled its requests (see
	// TestFilelogRereads).
	seen("recipe", recipe, m)
	seen("default", dflt, m)
	for _, r := range []*running{recipe, dflt} {
		if n := r.sink.LogRecordCount(); n != m {
			t.Fatalf("first read: %d entries delivered, want %d", n, m)
		}
	}
	journalctl(agent)
	agent.col.Kill()
	killProcesses(t, "journalctl", readers)
	readers = nil
	appendJournal(t, path, m, m+k, m+k)
	second := startAgent(t, agentYAML)
	// The second read: every entry of the file again.
	seen("recipe", recipe, m+m+k)
	seen("default", dflt, m+m+k)
	journalctl(second)
	recipeScrape, dfltScrape := recipe.scrape(), dflt.scrape()
	// Stopping flushes the gateways: what the sinks hold now is final.
	recipe.stop()
	dflt.stop()

	wantMessages := map[string]int{}
	wantTimes := map[int64]int{} // entry -> deliveries with the default identity
	reread := 0                  // re-read entries the default identity delivers again
	for i := range m + k {
		msg, us := journalEntry(i)
		wantMessages[msg]++
		wantTimes[us] = 1
		if i < m && wholeMillisecond(i) {
			wantTimes[us] = 2
			reread++
		}
	}
	if reread == 0 || len(wantMessages) == m+k {
		t.Fatal("the journal needs whole-millisecond entries and repeated messages")
	}

	recs := journaldRecords(t, recipe.sink)
	if len(recs) != m+k {
		t.Errorf("recipe: %d entries delivered, want %d", len(recs), m+k)
	}
	gotMessages, cursors := map[string]int{}, map[string]int{}
	for _, r := range recs {
		gotMessages[r.message]++
		cursors[r.cursor]++
	}
	for msg, n := range wantMessages {
		if gotMessages[msg] != n {
			t.Errorf("recipe: %q delivered %d times, written %d times", msg, gotMessages[msg], n)
		}
	}
	if len(cursors) != m+k {
		t.Errorf("recipe: %d distinct cursors delivered, want %d", len(cursors), m+k)
	}
	wantMetric(t, recipeScrape, metricRecords, sigLabels("dedup/journald", "logs", "outcome", "duplicate"), m)

	drecs := journaldRecords(t, dflt.sink)
	if len(drecs) != m+k+reread {
		t.Errorf("default identity: %d entries delivered, want %d (the %d re-read entries with a whole-millisecond timestamp again)", len(drecs), m+k+reread, reread)
	}
	gotTimes := map[int64]int{}
	for _, r := range drecs {
		gotTimes[r.timeUS]++
	}
	for us, n := range wantTimes {
		if gotTimes[us] != n {
			t.Errorf("default identity: the entry at %d µs delivered %d times, want %d", us, gotTimes[us], n)
		}
	}
	wantMetric(t, dfltScrape, metricRecords, sigLabels("dedup/journald", "logs", "outcome", "duplicate"), float64(m-reread))
	t.Logf("%d entries written, %d re-read (%d of them on a whole millisecond): the recipe delivered %d, the default identity %d",
		m+k, m, reread, len(recs), len(drecs))
}
