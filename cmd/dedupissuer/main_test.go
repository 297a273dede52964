package main

import (
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestIssuerWritesVariablesAndServes: the env file holds the issuer's URL,
// the audience and one token per subject, under the names
// examples/tenants-local.yaml uses, while the issuer serves its discovery
// document; it stops when told.
func TestIssuerWritesVariablesAndServes(t *testing.T) {
	env := filepath.Join(t.TempDir(), "issuer.env")
	stop := make(chan os.Signal)
	done := make(chan error, 1)
	go func() { done <- run(env, []string{"acme", "globex-2"}, stop) }()
	var text string
	testkit.WaitFor(t, "the env file", 30*time.Second, func() bool {
		b, _ := os.ReadFile(env)
		text = string(b)
		return text != ""
	})
	re := regexp.MustCompile(`^export OIDC_ISSUER_URL=(http://127\.0\.0\.1:\d+) OIDC_AUDIENCE=otelcol-dedup\nexport TOKEN_ACME=[\w-]+\.[\w-]+\.[\w-]+\nexport TOKEN_GLOBEX_2=[\w-]+\.[\w-]+\.[\w-]+\n$`)
	m := re.FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("env file:\n%s", text)
	}
	resp, err := http.Get(m[1] + "/.well-known/openid-configuration")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	http.DefaultClient.CloseIdleConnections()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("discovery: %s", resp.Status)
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text, "\r") {
		t.Error("carriage return in the env file")
	}
}
