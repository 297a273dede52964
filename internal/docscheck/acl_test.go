package docscheck

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestFleetACLOnePlace: the fleet's Redis ACL has one home,
// deploy/redis/fleet.acl, which the processor's tests run every call of the
// shared tier under (internal/redistier's TestFleetACL*). docs/security.md
// shows that line as it is; the examples that set a fleet user (standalone,
// Cluster, Sentinel) point at the file; deploy/compose's Redis loads the file and its gateways use its
// password; no other doc, example or deploy file holds a copy that could
// grow stale.
func TestFleetACLOnePlace(t *testing.T) {
	acl := redistest.FleetACL(t, "PASSWORD")
	if !strings.Contains(string(readFile(t, "docs/security.md")), "\n  "+acl+"\n") {
		t.Errorf("docs/security.md does not show %s's line:\n%s", redistest.FleetACLFile, acl)
	}
	for _, f := range []string{"examples/fleet-redis.yaml", "examples/ha-election.yaml", "examples/redis-cluster.yaml", "examples/redis-sentinel-tls.yaml"} {
		if !strings.Contains(headerComment(string(readFile(t, f))), redistest.FleetACLFile) {
			t.Errorf("%s's header does not name %s", f, redistest.FleetACLFile)
		}
	}

	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(readFile(t, composeFile), &compose); err != nil {
		t.Fatal(err)
	}
	redis := compose.Services["redis"]
	mount := "../redis/fleet.acl:/etc/redis/fleet.acl:ro"
	if !slices.Equal(redis.Command, []string{"redis-server", "--aclfile", "/etc/redis/fleet.acl"}) || !slices.Contains(redis.Volumes, mount) {
		t.Errorf("compose's redis: command %q, volumes %q; want it to load %s (%s)", redis.Command, redis.Volumes, redistest.FleetACLFile, mount)
	}
	for name, svc := range compose.Services {
		if p, ok := svc.Environment["REDIS_PASSWORD"]; ok && p != "PASSWORD" {
			t.Errorf("compose's %s: REDIS_PASSWORD %q, want the ACL file's PASSWORD", name, p)
		}
	}

	// A copy is a line granting the shared tier's scripts.
	var copies []string
	for _, dir := range []string{".", "docs", "examples", "deploy"} {
		err := filepath.WalkDir(filepath.Join(root(t), dir), func(path string, d os.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir() && dir == "." && path != root(t):
				return filepath.SkipDir // the top level's own files only
			case d.IsDir():
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if strings.Contains(string(b), "+@scripting") {
				rel, _ := filepath.Rel(root(t), path)
				copies = append(copies, rel)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(copies)
	if want := []string{"deploy/redis/fleet.acl", "docs/security.md"}; !slices.Equal(copies, want) {
		t.Errorf("files holding an ACL (+@scripting): %q, want %q", copies, want)
	}
}
