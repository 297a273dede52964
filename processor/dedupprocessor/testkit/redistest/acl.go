package redistest

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// The user and key prefix of the fleet's ACL, as deploy/redis/fleet.acl
// writes them.
const (
	FleetUser      = "fleet-a"
	FleetKeyPrefix = "fleet-a:"
)

// FleetACLFile is the ACL a fleet's collectors need, relative to the
// repository root: the one list of the commands the shared tier sends, which
// docs/security.md shows and deploy/compose mounts.
const FleetACLFile = "deploy/redis/fleet.acl"

// FleetACL returns the user line of FleetACLFile with password in place of
// its PASSWORD: a line of redis.conf (WithConfig, ClusterConfig.Config) as
// well as of an ACL file.
func FleetACL(tb testkit.TB, password string) string {
	tb.Helper()
	root, err := testkit.RepoRoot()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(root, FleetACLFile))
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	line := strings.TrimSpace(string(b))
	if strings.Count(line, "\n") > 0 || strings.Count(line, " >PASSWORD ") != 1 || !strings.HasPrefix(line, "user "+FleetUser+" ") {
		tb.Fatalf("redistest: %s must be one line, \"user %s ... >PASSWORD ...\", got:\n%s", FleetACLFile, FleetUser, line)
	}
	return strings.Replace(line, " >PASSWORD ", " >"+password+" ", 1)
}
