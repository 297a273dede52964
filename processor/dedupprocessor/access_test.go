package dedupprocessor

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

const (
	msgRefused  = "dedup: shared tier: Redis refuses the collector's credentials or permissions; batches follow redis.on_error until it accepts them"
	msgAccepted = "dedup: shared tier: Redis accepts the collector again"
	fixAuth     = "set redis.username and redis.password to a user Redis has (ACL users are per server: create it on every master and replica), or redis.password alone to requirepass's password"
)

// fixPerm is the fix named for a permission Redis refuses.
func fixPerm(prefix string) string {
	return fmt.Sprintf("give the ACL user what the shared tier needs, on every master and replica, with keys matching redis.key_prefix %q (docs/security.md)", prefix)
}

// statuses returns the status events the host received, as "status: error".
func (h *statusHost) statuses() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, ev := range h.events {
		s := ev.Status().String()
		if ev.Err() != nil {
			s += ": " + ev.Err().Error()
		}
		out = append(out, s)
	}
	return out
}

func wantStatuses(t *testing.T, h *statusHost, want ...string) {
	t.Helper()
	got := h.statuses()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("status events:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestWrongPasswordNamedAtStart: with a password Redis refuses, the start
// names the refusal and the fix in one error line (not "did not answer"),
// the host gets a recoverable error status, and batches follow on_error.
// Once Redis accepts the password (an operator set it there), the tier
// connects without a restart and the status returns to OK.
func TestWrongPasswordNamedAtStart(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithACLUser("dedup", "s3cret"))
	cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
	r := cfg.Redis.Get()
	r.Username, r.Password = "dedup", configopaque.String("rotated")
	core, logs := observer.New(zap.InfoLevel)
	host := &statusHost{}
	sink := new(consumertest.LogsSink)
	h := newHarnessOn(t, host, cfg, sink, zap.New(core))

	entries := logs.FilterMessage(msgRefused).All()
	if len(entries) != 1 || entries[0].Level != zap.ErrorLevel {
		t.Fatalf("refusal lines at start: %v, want one error", entries)
	}
	fields := entries[0].ContextMap()
	wantErr := "no endpoint told what it is: " + srv.Addr() + ": WRONGPASS invalid username-password pair or user is disabled."
	if fields["error"] != wantErr || fields["fix"] != fixAuth || fields["username"] != "dedup" || fields["on_error"] != "pass" {
		t.Fatalf("refusal line's fields: %v", fields)
	}
	if n := logs.FilterMessageSnippet("did not answer").Len(); n != 0 {
		t.Fatalf("%d lines say Redis did not answer; it answered, refusing", n)
	}
	refused := "StatusRecoverableError: dedup: Redis refuses the collector (" + wantErr + "); " + fixAuth
	wantStatuses(t, host, refused)

	// on_error: pass delivers on the local cache's word; the refusal is not
	// reported again.
	if err := h.consume(events(1, 1, 2)); err != nil {
		t.Fatal(err)
	}
	if n, e := sink.LogRecordCount(), h.redisRequests("claim", "error"); n != 2 || e != 1 {
		t.Fatalf("delivered %d, claim errors %d; want 2 and 1", n, e)
	}
	wantStatuses(t, host, refused)
	if n := logs.FilterMessage(msgRefused).Len(); n != 1 {
		t.Fatalf("%d refusal lines, want 1", n)
	}

	// The operator adds the password the collector has.
	if err := srv.Client().Do(context.Background(), "acl", "setuser", "dedup", ">rotated").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the tier connecting once Redis accepts the password", 10*time.Second, func() bool {
		return logs.FilterMessage(msgAccepted).Len() == 1
	})
	wantStatuses(t, host, refused, "StatusOK")
	if err := h.consume(events(3)); err != nil {
		t.Fatal(err)
	}
	if ok := h.redisRequests("claim", "ok"); ok != 1 {
		t.Fatalf("claims ok = %d after the fix, want 1", ok)
	}
}

// TestNoPermNamedAtStart: an ACL user that may not do what a claim does is
// named at start, with the fix, before any batch: keys outside its pattern
// (a key_prefix the ACL does not match), no scripts, no clock. Batches
// follow on_error (refuse: refused); once the ACL is fixed, the next claim
// succeeds and the status returns to OK.
func TestNoPermNamedAtStart(t *testing.T) {
	for _, tc := range []struct {
		name, rules, fixed string
		err                string
	}{
		{"keys outside the pattern", "~fleet-b:* +@all", "~fleet-a:*",
			"NOPERM this user has no permissions to access one of the keys used as arguments"},
		{"no scripts", "~fleet-a:* +@all -@scripting", "+@scripting",
			"NOPERM this user has no permissions to run the 'evalsha' command"},
		{"no clock", "~fleet-a:* +@all -time", "+time",
			"ERR The user executing the script can't run this command or subcommand script: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Standalone(t, redistest.WithConfig("user fleet-a on >s3cret resetkeys "+tc.rules))
			cfg := redisConfig([]string{srv.Addr()}, ErrorRefuse)
			r := cfg.Redis.Get()
			r.Username, r.Password, r.KeyPrefix = "fleet-a", "s3cret", "fleet-a:"
			core, logs := observer.New(zap.InfoLevel)
			host := &statusHost{}
			h := newHarnessOn(t, host, cfg, new(consumertest.LogsSink), zap.New(core))

			entries := logs.FilterMessage(msgRefused).All()
			if len(entries) != 1 {
				t.Fatalf("%d refusal lines at start, want 1", len(entries))
			}
			fields := entries[0].ContextMap()
			errText, _ := fields["error"].(string)
			if !strings.HasPrefix(errText, srv.Addr()+": "+tc.err) || fields["fix"] != fixPerm("fleet-a:") {
				t.Fatalf("refusal line's fields: %v\nwant error %s: %s...", fields, srv.Addr(), tc.err)
			}
			refused := "StatusRecoverableError: dedup: Redis refuses the collector (" + errText + "); " + fixPerm("fleet-a:")
			wantStatuses(t, host, refused)
			if err := h.consume(events(1)); err == nil {
				t.Fatal("refuse: a batch was accepted while Redis refused the claims")
			}
			wantStatuses(t, host, refused)

			if err := srv.Client().Do(context.Background(), "acl", "setuser", "fleet-a", tc.fixed).Err(); err != nil {
				t.Fatal(err)
			}
			// A user that could not read the layout's shape left the tier
			// unconnected: it asks again in the background, within 2 s.
			testkit.WaitFor(t, "a claim after the fix", 10*time.Second, func() bool { return h.consume(events(1)) == nil })
			wantStatuses(t, host, refused, "StatusOK")
			if n := logs.FilterMessage(msgAccepted).Len(); n != 1 {
				t.Fatalf("%d lines saying Redis accepts the collector again, want 1", n)
			}
		})
	}
}

// TestPermissionWithdrawnWhileRunning: an ACL rule withdrawn from a running
// fleet's user is named at the next claim, with the fix, and the status
// follows; once the rule is back, it returns to OK.
func TestPermissionWithdrawnWhileRunning(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig("user fleet-a on >s3cret resetkeys ~fleet-a:* +@all"))
	cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
	r := cfg.Redis.Get()
	r.Username, r.Password, r.KeyPrefix = "fleet-a", "s3cret", "fleet-a:"
	core, logs := observer.New(zap.InfoLevel)
	host := &statusHost{}
	h := newHarnessOn(t, host, cfg, new(consumertest.LogsSink), zap.New(core))
	setUser := func(rule string) {
		t.Helper()
		if err := srv.Client().Do(context.Background(), "acl", "setuser", "fleet-a", rule).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.consume(events(1)); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, host)

	setUser("-evalsha")
	if err := h.consume(events(2)); err != nil {
		t.Fatal(err)
	}
	refused := "StatusRecoverableError: dedup: Redis refuses the collector (dedup: redis claim: node " + srv.Addr() + ": NOPERM this user has no permissions to run the 'evalsha' command); " + fixPerm("fleet-a:")
	wantStatuses(t, host, refused)
	if n := logs.FilterMessage(msgRefused).Len(); n != 1 {
		t.Fatalf("%d refusal lines, want 1", n)
	}

	setUser("+evalsha")
	if err := h.consume(events(3)); err != nil {
		t.Fatal(err)
	}
	wantStatuses(t, host, refused, "StatusOK")
	if ok, e := h.redisRequests("claim", "ok"), h.redisRequests("claim", "error"); ok != 2 || e != 1 {
		t.Fatalf("claims ok %d, error %d; want 2 and 1", ok, e)
	}
}

// TestRefusalChangesCause: the password is fixed in Redis but the user still
// may not run the scripts: the tier connects, the start's access check runs
// then, and the new refusal is named with its own fix; the status follows,
// and nothing says Redis accepts the collector.
func TestRefusalChangesCause(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig("user fleet-a on >s3cret resetkeys ~fleet-a:* +@all -evalsha -eval"))
	cfg := redisConfig([]string{srv.Addr()}, ErrorPass)
	r := cfg.Redis.Get()
	r.Username, r.Password, r.KeyPrefix = "fleet-a", "rotated", "fleet-a:"
	core, logs := observer.New(zap.InfoLevel)
	host := &statusHost{}
	newHarnessOn(t, host, cfg, new(consumertest.LogsSink), zap.New(core))
	if err := srv.Client().Do(context.Background(), "acl", "setuser", "fleet-a", ">rotated").Err(); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the refusal of the scripts", 10*time.Second, func() bool {
		return logs.FilterMessage(msgRefused).Len() == 2
	})
	second := logs.FilterMessage(msgRefused).All()[1].ContextMap()
	want := srv.Addr() + ": NOPERM this user has no permissions to run the 'evalsha' command"
	if second["error"] != want || second["fix"] != fixPerm("fleet-a:") {
		t.Fatalf("second refusal: %v, want error %q", second, want)
	}
	got := host.statuses()
	if len(got) != 2 || !strings.Contains(got[0], "WRONGPASS") || got[1] != "StatusRecoverableError: dedup: Redis refuses the collector ("+want+"); "+fixPerm("fleet-a:") {
		t.Fatalf("status events: %q", got)
	}
	if n := logs.FilterMessage(msgAccepted).Len(); n != 0 {
		t.Fatalf("%d lines say Redis accepts the collector", n)
	}
}
