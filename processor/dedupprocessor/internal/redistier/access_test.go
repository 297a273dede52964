package redistier

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestDenied: what Redis answers a user it refuses, at login, for a command,
// for a key, inside a script, is a refusal; an outage or a full server is
// not.
func TestDenied(t *testing.T) {
	srv := redistest.Standalone(t, redistest.WithConfig("user fleet-a on >s3cret resetkeys ~fleet-a:* +@all -time -config"))
	ctx := context.Background()
	down := redistest.Standalone(t)
	down.Kill()
	for _, tc := range []struct {
		name    string
		opts    Options
		want    bool
		message string
	}{
		{"wrong password", Options{Username: "fleet-a", Password: "wrong"}, true, "WRONGPASS invalid username-password pair or user is disabled."},
		{"no password", Options{}, false, ""}, // the default user is on, with every right
		{"Redis down", Options{Endpoints: []string{down.Addr()}}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Endpoints = cmpOr(tc.opts.Endpoints, []string{srv.Addr()})
			tc.opts.Window = testWindow
			tr := newTier(t, tc.opts)
			err := tr.Unknown()
			if Denied(err) != tc.want {
				t.Fatalf("Denied(%v) = %v, want %v", err, !tc.want, tc.want)
			}
			if tc.want && err.Error() != "no endpoint told what it is: "+srv.Addr()+": "+tc.message {
				t.Fatalf("Unknown() = %v", err)
			}
		})
	}
	c := newTier(t, Options{Endpoints: []string{srv.Addr()}, Username: "fleet-a", Password: "s3cret", Window: testWindow, KeyPrefix: "fleet-a:"})
	if err := c.Unknown(); err != nil {
		t.Fatalf("Unknown() of a connected tier = %v", err)
	}
	client := c.conn.Load().exec.(*singleExec).client
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a command", client.Do(ctx, "time").Err(), true},
		{"a key", client.Get(ctx, "fleet-b:x").Err(), true},
		{"inside a script", client.Eval(ctx, "return redis.call('TIME')", nil).Err(), true},
		{"a key inside a script", client.Eval(ctx, "return redis.call('GET', 'fleet-b:x')", nil).Err(), true},
		{"wrapped", fmt.Errorf("dedup: redis claim: node x: %w", client.Do(ctx, "config", "get", "save").Err()), true},
		{"joined", errors.Join(errors.New("timeout"), client.Do(ctx, "time").Err()), true},
		{"full", client.Eval(ctx, "return redis.error_reply('OOM command not allowed when used memory > maxmemory')", nil).Err(), false},
		{"a script error", client.Eval(ctx, "return redis.call('NOSUCHCOMMAND')", nil).Err(), false},
		{"nil", nil, false},
	} {
		if got := Denied(tc.err); got != tc.want {
			t.Errorf("%s: Denied(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func cmpOr[T any](a, b []T) []T {
	if len(a) > 0 {
		return a
	}
	return b
}

// TestAccess: Access names each refusal a claim would meet, with its node,
// before any claim; a user with what the tier needs meets none.
func TestAccess(t *testing.T) {
	for _, tc := range []struct {
		rules string
		want  string // after the node's address
	}{
		{"~fleet-a:* +@all", ""},
		{"~fleet-b:* +@all", ": NOPERM this user has no permissions to access one of the keys used as arguments"},
		{"~fleet-a:* +@all -evalsha -eval", ": NOPERM this user has no permissions to run the 'evalsha' command"},
	} {
		t.Run(tc.rules, func(t *testing.T) {
			srv := redistest.Standalone(t, redistest.WithConfig("user fleet-a on >s3cret resetkeys "+tc.rules))
			tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, Username: "fleet-a", Password: "s3cret", Window: testWindow, KeyPrefix: "fleet-a:"})
			// A user that may not read the layout's shape leaves the tier
			// unconnected, the refusal its reason; one that may, Access
			// checks.
			err := tr.Access(context.Background())
			if tr.Mode() == "" {
				err = tr.Unknown()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Access: %v", err)
			case tc.want != "" && (err == nil || err.Error() != srv.Addr()+tc.want):
				t.Fatalf("Access: %v, want %s%s", err, srv.Addr(), tc.want)
			}
		})
	}
}
