package docscheck

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// healthBlock returns docs/monitoring.md's health_check fragment and the
// feature-gate flag its text says it runs with.
func healthBlock(t *testing.T) (text, gates string) {
	t.Helper()
	for _, b := range docBlocks(t) {
		if b.file == "docs/monitoring.md" && b.gates != "" {
			if b.completedBy != "examples/fleet-redis.yaml" {
				t.Fatalf("%s is completed by %s, want examples/fleet-redis.yaml", b, b.completedBy)
			}
			return b.text, b.gates
		}
	}
	t.Fatal("docs/monitoring.md has no fragment that runs with --feature-gates")
	return "", ""
}

// health is what health_check's URL answers: its HTTP status, and the
// dedup processor's status and error in the logs pipeline ("" without the
// feature gate, whose body does not list components).
type health struct {
	code          int
	body          string
	status, error string
}

func getHealth(t *testing.T, c *collector) health {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.ports.Health+"/?verbose", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	h := health{code: resp.StatusCode, body: string(b)}
	var st struct {
		Components map[string]struct {
			Components map[string]struct {
				Status string `json:"status"`
				Error  string `json:"error"`
			} `json:"components"`
		} `json:"components"`
	}
	if json.Unmarshal(b, &st) == nil {
		if p, ok := st.Components["pipeline:logs"].Components["processor:dedup"]; ok {
			h.status, h.error = p.Status, p.Error
		}
	}
	return h
}

// TestHealthShowsRedisRefusal: the health_check of docs/monitoring.md, merged
// over examples/fleet-redis.yaml and run with the feature gate the text
// names, shows a Redis that refuses the fleet's password: the dedup
// processor's recoverable error, naming WRONGPASS and the fix, at once; a
// failing answer once it lasted recovery_duration; healthy again once Redis
// accepts the password, with no restart. Without the gate, health_check
// says "Server available" all along, as the text says.
func TestHealthShowsRedisRefusal(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig(redistest.FleetACL(t, fleetPassword)))
	block, gates := healthBlock(t)
	path := filepath.Join(t.TempDir(), "health.yaml")
	if err := os.WriteFile(path, []byte(block), 0o600); err != nil {
		t.Fatal(err)
	}
	env := []string{"REDIS_ADDR=" + srv.Addr(), "REDIS_PASSWORD=rotated", "OTLP_BACKEND=" + newSink(t).GRPCEndpoint()}
	configs := []string{filepath.Join(root(t), "examples", "fleet-redis.yaml"), path}
	// The test's listeners, and a shorter recovery_duration than the docs'.
	listen := exampleOverride(t, "fleet-redis.yaml") + fmt.Sprintf(`
---
extensions:
  health_check:
    http: {endpoint: %q}
    component_health: {recovery_duration: 3s}
`, e2e.ListenHealth)
	overrides := strings.Split(listen, "\n---\n")

	legacy := startCollector(t, env, configs[:1], overrides[0])
	if h := getHealth(t, legacy); h.code != http.StatusOK || !strings.Contains(h.body, `"status":"Server available"`) {
		t.Fatalf("without the gate: %d %s", h.code, h.body)
	}
	legacy.stop()

	c := startCollectorFlags(t, []string{gates}, env, configs, overrides...)
	h := getHealth(t, c)
	wantErr := "dedup: Redis refuses the collector (no endpoint told what it is: " + srv.Addr() + ": WRONGPASS invalid username-password pair or user is disabled.); set redis.username and redis.password"
	if h.status != "StatusRecoverableError" || !strings.HasPrefix(h.error, wantErr) {
		t.Fatalf("dedup's status: %q %q\nwant StatusRecoverableError %s...\n%s", h.status, h.error, wantErr, h.body)
	}
	testkit.WaitFor(t, "health failing once the error lasted recovery_duration", 15*time.Second, func() bool {
		return getHealth(t, c).code == http.StatusInternalServerError
	})

	if err := srv.Client().Do(context.Background(), "acl", "setuser", "fleet-a", ">rotated").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "health back to OK once Redis accepts the password", 15*time.Second, func() bool {
		h = getHealth(t, c)
		return h.code == http.StatusOK && h.status == "StatusOK"
	}, func() string { return h.body })
}
