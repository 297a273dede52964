package docscheck

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestExampleRedisCluster: two collectors run examples/redis-cluster.yaml
// against a real Redis Cluster whose every node has the fleet's ACL user of
// deploy/redis/fleet.acl, given two of its nodes in REDIS_ENDPOINTS as the
// header says: a record sent to both is delivered once.
func TestExampleRedisCluster(t *testing.T) {
	cl := redistest.NewCluster(t, redistest.ClusterConfig{Masters: 3, Config: []string{redistest.FleetACL(t, fleetPassword)}})
	sink := newSink(t)
	env := []string{
		fmt.Sprintf("REDIS_ENDPOINTS=[%s]", strings.Join(cl.Addrs()[1:], ", ")),
		"REDIS_PASSWORD=" + fleetPassword,
	}
	a := runExample(t, "redis-cluster.yaml", sink, false, env...)
	b := runExample(t, "redis-cluster.yaml", sink, false, env...)
	ctx := ctxT(t)
	mustSend(t, "to a", a.grpcSender().SendLogs(ctx, event("evt-1", "first attempt")))
	mustSend(t, "to b", b.grpcSender().SendLogs(ctx, event("evt-1", "retry")))
	mustSend(t, "to b", b.grpcSender().SendLogs(ctx, event("evt-2", "another event")))
	scB := b.scrape()
	a.stop()
	b.stop()
	if got := sink.LogRecordCount(); got != 2 {
		t.Errorf("delivered %d records, want 2 (evt-1 once, evt-2)", got)
	}
	l := e2e.Labels{"processor": "dedup", "otel_signal": "logs", "caught_by": "redis"}
	if got := scB.Sum("otelcol_processor_dedup_duplicates", l); got != 1 {
		t.Errorf("b: duplicates%v = %g, want 1", l, got)
	}
	if got := scB.Sum("otelcol_processor_dedup_redis_requests", e2e.Labels{"result": "error"}); got != 0 {
		t.Errorf("b: %g failed calls to the Cluster", got)
	}
}

// TestExamplesOTLPBackendIsHostPort: OTLP_BACKEND means one thing in every
// example, the backend's host:port, as its header says.
func TestExamplesOTLPBackendIsHostPort(t *testing.T) {
	use := regexp.MustCompile(`\$\{env:OTLP_BACKEND:-([^}]*)\}`)
	hostPort := regexp.MustCompile(`^[a-z0-9.-]+:\d+$`)
	for _, name := range exampleFiles {
		text := string(readFile(t, "examples/"+name))
		uses := use.FindAllStringSubmatch(text, -1)
		if len(uses) == 0 {
			continue
		}
		for _, u := range uses {
			if !hostPort.MatchString(u[1]) {
				t.Errorf("%s: OTLP_BACKEND's default %q is not host:port", name, u[1])
			}
		}
		if !regexp.MustCompile(`#\s+OTLP_BACKEND\s+the OTLP/(gRPC|HTTP) backend, host:port`).MatchString(headerComment(text)) {
			t.Errorf("%s's header does not describe OTLP_BACKEND as the backend's host:port", name)
		}
	}
}

// TestTenantsLocalLeavesTheTreeClean: the file the tenants-local walk-through
// has the issuer write, in the repository's root, is one git ignores, and
// the walk-through's last step removes it.
func TestTenantsLocalLeavesTheTreeClean(t *testing.T) {
	header := headerComment(string(readFile(t, "examples/tenants-local.yaml")))
	m := regexp.MustCompile(`-env (\S+)`).FindStringSubmatch(header)
	if m == nil {
		t.Fatal("examples/tenants-local.yaml's header no longer runs the issuer with -env FILE")
	}
	cmd := exec.Command("git", "check-ignore", "-q", m[1])
	cmd.Dir = root(t)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1")
	if err := cmd.Run(); err != nil {
		t.Errorf("git does not ignore %s, which the walk-through writes in the repository's root (git check-ignore: %v)", m[1], err)
	}
	if !strings.Contains(header, "rm "+m[1]) {
		t.Errorf("the walk-through does not remove %s when it ends", m[1])
	}
}
