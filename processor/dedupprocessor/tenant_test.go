package dedupprocessor

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/identity"
)

// authData is client.AuthData as an authenticator sets it.
type authData map[string]any

func (a authData) GetAttribute(name string) any { return a[name] }
func (a authData) GetAttributeNames() []string {
	names := make([]string, 0, len(a))
	for k := range a {
		names = append(names, k)
	}
	return names
}

// fakeAuthenticator has the shape of an extensionauth.Server.
type fakeAuthenticator struct{ component.StartFunc }

func (fakeAuthenticator) Shutdown(context.Context) error { return nil }
func (fakeAuthenticator) Authenticate(ctx context.Context, _ map[string][]string) (context.Context, error) {
	return ctx, nil
}

var authHost = hostWith{component.MustNewID("oidc"): fakeAuthenticator{}}

// request is a request's context: its authenticated attributes (nil: no
// authenticator ran) and its headers (key, value pairs).
func request(auth authData, headers ...string) context.Context {
	info := client.Info{}
	if auth != nil {
		info.Auth = auth
	}
	md := map[string][]string{}
	for i := 0; i+1 < len(headers); i += 2 {
		md[headers[i]] = append(md[headers[i]], headers[i+1])
	}
	info.Metadata = client.NewMetadata(md)
	return client.NewContext(context.Background(), info)
}

// TestAuthAttributesPartition: with auth_attributes the partition is the
// authenticated subject, so a sender who sets another tenant's header
// cannot suppress that tenant's events, and requests without a subject
// share one partition of their own, counted by reason.
func TestAuthAttributesPartition(t *testing.T) {
	sink := new(consumertest.LogsSink)
	cfg := defaultConfig()
	cfg.MetadataKeys = []string{"X-Scope-OrgID"}
	cfg.AuthAttributes = []string{"subject"}
	h := newHarnessOn(t, authHost, cfg, sink)
	alice, bob := authData{"subject": "alice"}, authData{"subject": "bob"}
	ev := rec{body: "same event", resource: "svc"}
	steps := []struct {
		what      string
		ctx       context.Context
		delivered int // running totals after the step
		dups      int
		unauth    int // unidentified_records{reason="unauthenticated"}
		missing   int // unidentified_records{reason="missing_attribute"}
	}{
		{"bob first, with alice's header", request(bob, "X-Scope-OrgID", "a"), 1, 0, 0, 0},
		{"alice, her own header", request(alice, "X-Scope-OrgID", "a"), 2, 0, 0, 0},
		{"alice's retry", request(alice, "X-Scope-OrgID", "a"), 2, 1, 0, 0},
		{"bob's retry", request(bob, "X-Scope-OrgID", "a"), 2, 2, 0, 0},
		{"no authenticator, alice's header", request(nil, "X-Scope-OrgID", "a"), 3, 2, 1, 0},
		{"an empty subject, alice's header", request(authData{"subject": ""}, "X-Scope-OrgID", "a"), 3, 3, 1, 1},
		{"no subject attribute, alice's header", request(authData{"membership": []string{"a"}}, "X-Scope-OrgID", "a"), 3, 4, 1, 2},
		{"alice, another header", request(alice, "X-Scope-OrgID", "b"), 4, 4, 1, 2},
	}
	reason := func(r string) int64 {
		return h.metric("otelcol_processor_dedup_unidentified_records", attribute.String("reason", r))
	}
	for _, st := range steps {
		if err := h.proc.ConsumeLogs(st.ctx, logs(ev)); err != nil {
			t.Fatalf("%s: %v", st.what, err)
		}
		n, d, u, m := sink.LogRecordCount(), h.outcome("duplicate"), reason("unauthenticated"), reason("missing_attribute")
		if n != st.delivered || d != int64(st.dups) || u != int64(st.unauth) || m != int64(st.missing) {
			t.Fatalf("after %s: delivered=%d duplicate=%d unidentified unauthenticated=%d missing_attribute=%d, want %d %d %d %d",
				st.what, n, d, u, m, st.delivered, st.dups, st.unauth, st.missing)
		}
	}
}

// TestUnidentifiedLoggedWithTheFix: a request without the identity is
// logged with what to change, at most once per 10 seconds per reason, the
// line saying how many requests it stands for; the missing attribute is
// named. oidc without groups_claim and auth_attributes: [membership] is the
// missing_attribute case.
func TestUnidentifiedLoggedWithTheFix(t *testing.T) {
	core, observed := observer.New(zapcore.WarnLevel)
	cfg := defaultConfig()
	cfg.AuthAttributes = []string{"membership"}
	h := newHarnessOn(t, authHost, cfg, new(consumertest.LogsSink), zap.New(core))
	noGroups := authData{"subject": "team-a-agent"} // oidc sets no membership without groups_claim
	for i := range 3 {
		for _, ctx := range []context.Context{request(nil), request(noGroups)} {
			if err := h.proc.ConsumeLogs(ctx, logs(rec{body: fmt.Sprint("event ", i), resource: "svc"})); err != nil {
				t.Fatal(err)
			}
		}
	}
	type line struct {
		msg, missing string
		occurrences  int64
	}
	var got []line
	for _, e := range observed.All() {
		l := line{msg: e.Message}
		for _, f := range e.Context {
			switch f.Key {
			case "missing":
				l.missing = f.String
			case "occurrences":
				l.occurrences = f.Integer
			}
		}
		got = append(got, l)
	}
	want := []line{
		{unidentifiedFix[unidentifiedUnauthenticated], "", 1},
		{unidentifiedFix[unidentifiedMissingAttribute], "membership", 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("warnings = %+v\nwant %+v", got, want)
	}
	for _, msg := range []string{"auth.authenticator of every receiver", "groups_claim"} {
		if !strings.Contains(got[0].msg+got[1].msg, msg) {
			t.Errorf("the warnings do not name the fix %q", msg)
		}
	}
	if u, m := h.metric("otelcol_processor_dedup_unidentified_records", attribute.String("reason", "unauthenticated")),
		h.metric("otelcol_processor_dedup_unidentified_records", attribute.String("reason", "missing_attribute")); u != 3 || m != 3 {
		t.Errorf("unidentified_records unauthenticated=%d missing_attribute=%d, want 3 3", u, m)
	}
}

// TestAuthAttributeValues: every shape an authenticator returns keeps
// identities apart, a missing value is never an identity, and the digest
// without auth_attributes is what metadata_keys alone made before.
func TestAuthAttributeValues(t *testing.T) {
	var enc identity.Encoder
	digestOf := func(cfg *Config, ctx context.Context) (string, bool) {
		d, ok := tenantDigest(ctx, cfg, &enc)
		return string(d[:]), ok
	}
	cfg := defaultConfig()
	cfg.AuthAttributes = []string{"membership", "claims.tenant"}
	seen := map[string]string{}
	for name, auth := range map[string]authData{
		"groups a":         {"membership": []string{"a"}, "claims.tenant": "t"},
		"groups a, b":      {"membership": []string{"a", "b"}, "claims.tenant": "t"},
		"groups b, a":      {"membership": []string{"b", "a"}, "claims.tenant": "t"},
		"groups ab":        {"membership": []string{"ab"}, "claims.tenant": "t"},
		"json claim":       {"membership": []string{"a"}, "claims.tenant": []any{"t"}},
		"json number":      {"membership": []string{"a"}, "claims.tenant": float64(7)},
		"json object":      {"membership": []string{"a"}, "claims.tenant": map[string]any{"id": "t"}},
		"other json claim": {"membership": []string{"a"}, "claims.tenant": "u"},
	} {
		d, ok := digestOf(cfg, request(auth))
		if !ok {
			t.Errorf("%s: unidentified, want an identity", name)
		}
		if other, dup := seen[d]; dup {
			t.Errorf("%s and %s share a partition", name, other)
		}
		seen[d] = name
	}
	anon, _ := digestOf(cfg, request(nil))
	for name, auth := range map[string]authData{
		"no auth data":     nil,
		"no membership":    {"claims.tenant": "t"},
		"empty membership": {"membership": []string{}, "claims.tenant": "t"},
		"empty claim":      {"membership": []string{"a"}, "claims.tenant": ""},
		"empty json list":  {"membership": []string{"a"}, "claims.tenant": []any{}},
	} {
		d, ok := digestOf(cfg, request(auth))
		if ok || d != anon {
			t.Errorf("%s: identified=%v, same partition as no auth=%v; want false, true", name, ok, d == anon)
		}
		if _, dup := seen[d]; dup {
			t.Errorf("%s shares a partition with an identity", name)
		}
	}

	// metadata_keys alone: the encoding the shared tier and snapshots
	// already hold.
	md := defaultConfig()
	md.MetadataKeys = []string{"X-Scope-OrgID"}
	got, ok := digestOf(md, request(authData{"subject": "alice"}, "X-Scope-OrgID", "a"))
	enc.Reset()
	enc.Uint(1)
	enc.String("a")
	want := enc.Digest().Bytes()
	if !ok || got != string(want[:]) {
		t.Errorf("metadata_keys digest changed")
	}
	if d, ok := digestOf(defaultConfig(), request(authData{"subject": "alice"})); !ok || d != string(make([]byte, len(d))) {
		t.Errorf("no partition configured: identified=%v, digest not zero", ok)
	}

	// A snapshot or a shared key space made under other partition settings
	// is not reused.
	if identityFingerprint(md) == identityFingerprint(cfg) {
		t.Error("auth_attributes left the identity fingerprint unchanged")
	}
}

// TestAuthAttributesNeedAnAuthenticator: auth_attributes on a collector
// without a server authenticator extension is refused at start, naming the
// fix.
func TestAuthAttributesNeedAnAuthenticator(t *testing.T) {
	cfg := defaultConfig()
	cfg.AuthAttributes = []string{"subject"}
	start := func(host component.Host) error {
		p, err := NewFactory().CreateLogs(context.Background(), processortest.NewNopSettings(componentType), cfg, new(consumertest.LogsSink))
		if err != nil {
			t.Fatal(err)
		}
		err = p.Start(context.Background(), host)
		if serr := p.Shutdown(context.Background()); serr != nil {
			t.Error(serr)
		}
		return err
	}
	const want = "dedup: auth_attributes [subject] needs an authenticator, and the collector runs none: add one (e.g. oidc) to extensions and service.extensions and name it in the receivers' auth.authenticator, or remove auth_attributes"
	if err := start(hostWith{storageID: &memStorage{}}); err == nil || err.Error() != want {
		t.Errorf("without an authenticator: %v\nwant %s", err, want)
	}
	if err := start(authHost); err != nil {
		t.Errorf("with an authenticator: %v", err)
	}
}
