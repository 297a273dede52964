package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

const tokenAudience = "otelcol-dedup"

// authConfig is a collector whose OTLP receivers (gRPC and HTTP) accept
// only tokens of iss, verified by the oidc extension, keep the request
// headers, and feed one logs pipeline whose
// dedup settings are dedup.
func authConfig(iss *Issuer, dedup string) string {
	return fmt.Sprintf(`
extensions:
  oidc:
    providers:
      - issuer_url: %s
        audience: %s
receivers:
  otlp:
    protocols:
      grpc:
        include_metadata: true
        auth: {authenticator: oidc}
      http:
        include_metadata: true
        auth: {authenticator: oidc}
processors:
  dedup:
%s
service:
  extensions: [health_check, oidc]
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`, iss.URL, tokenAudience, dedup)
}

func startIssuer(t *testing.T) *Issuer {
	t.Helper()
	iss, err := NewIssuer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(iss.Close)
	return iss
}

// credential is one sender: a token of its own, over gRPC and over HTTP,
// with extra headers.
type credential struct {
	grpc logSender
	ctx  context.Context
	http *otlp.Client
}

func (r *running) credential(t *testing.T, ctx context.Context, iss *Issuer, subject string, claims map[string]any, headers ...string) credential {
	t.Helper()
	tok, err := iss.Token(tokenAudience, subject, claims)
	if err != nil {
		t.Fatal(err)
	}
	h := r.httpSender()
	h.Header = http.Header{"Authorization": {"Bearer " + tok}}
	for i := 0; i+1 < len(headers); i += 2 {
		h.Header.Add(headers[i], headers[i+1])
	}
	return credential{
		grpc: r.grpcSender(),
		ctx:  metadata.AppendToOutgoingContext(ctx, append([]string{"authorization", "Bearer " + tok}, headers...)...),
		http: h,
	}
}

type authStep struct {
	what    string
	send    func() error
	unique  int // running totals after the step
	dups    int
	unident int
}

func runAuthSteps(t *testing.T, r *running, steps []authStep) {
	t.Helper()
	l := func(kv ...string) Labels { return dedupLabels("dedup", kv...) }
	for _, st := range steps {
		mustSend(t, st.what, st.send())
		sc := r.scrape()
		u, d, n := sc.Sum(metricRecords, l("outcome", "unique")), sc.Sum(metricRecords, l("outcome", "duplicate")),
			sc.Sum("otelcol_processor_dedup_unidentified_records", l())
		if u != float64(st.unique) || d != float64(st.dups) || n != float64(st.unident) {
			t.Errorf("after %s: unique %g, duplicate %g, unidentified %g; want %d, %d, %d", st.what, u, d, n, st.unique, st.dups, st.unident)
		}
	}
}

// TestAuthenticatedTenants: with auth_attributes: [subject] behind the oidc
// authenticator, two senders with their own tokens sending the same event
// IDs both get them delivered, and a sender that sets the other's tenant
// header (which metadata_keys alone would trust) cannot suppress the
// other's events, over gRPC or HTTP. A request without a token never
// reaches the pipeline.
func TestAuthenticatedTenants(t *testing.T) {
	iss := startIssuer(t)
	r := startCollector(t, nil, authConfig(iss, `
    metadata_keys: [X-Scope-OrgID]
    auth_attributes: [subject]
    logs:
      key: ['attributes["event.id"]']`))
	c, _ := eventCorpus(10)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	acme := r.credential(t, ctx, iss, "acme-agent", nil, "X-Scope-OrgID", "acme")
	mallory := r.credential(t, ctx, iss, "mallory", nil, "X-Scope-OrgID", "acme") // claims acme's header
	req := func() plog.Logs { return c.batch(span(0, 10)...) }

	runAuthSteps(t, r, []authStep{
		{"mallory first, with acme's header, acme's event IDs", func() error { return mallory.grpc.SendLogs(mallory.ctx, req()) }, 10, 0, 0},
		{"acme's events", func() error { return acme.grpc.SendLogs(acme.ctx, req()) }, 20, 0, 0},
		{"acme's retry over HTTP", func() error { return acme.http.SendLogs(ctx, req()) }, 20, 10, 0},
		{"mallory again over HTTP", func() error { return mallory.http.SendLogs(ctx, req()) }, 20, 20, 0},
	})

	// No token: refused by the receiver's authenticator, never counted.
	noToken := r.httpSender()
	noToken.Header = http.Header{"X-Scope-OrgID": {"acme"}}
	var se *otlp.HTTPError
	if err := noToken.SendLogs(ctx, req()); !errors.As(err, &se) || se.StatusCode != http.StatusUnauthorized {
		t.Errorf("HTTP without a token: %v, want status 401", err)
	}
	if err := r.grpcSender().SendLogs(metadata.AppendToOutgoingContext(ctx, "X-Scope-OrgID", "acme"), req()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("gRPC without a token: %v, want Unauthenticated", err)
	}
	wantCounts(t, r.scrape(), "dedup", "logs", dedupCounts{unique: 20, duplicate: 20, local: 20, entries: 20})

	r.stop()
	wantEach(t, r.sink, c, span(0, 10), 2) // once per credential
}

// TestAuthenticatedClaim: with auth_attributes: [claims.team] the
// partition is a claim of the token, so two credentials of one team (an HA
// pair of agents, each with its own token) are deduplicated against each
// other, and tokens without the claim share one partition of their own,
// counted.
func TestAuthenticatedClaim(t *testing.T) {
	iss := startIssuer(t)
	r := startCollector(t, nil, authConfig(iss, `
    auth_attributes: [claims.team]
    logs:
      key: ['attributes["event.id"]']`))
	c, _ := eventCorpus(10)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	payments := map[string]any{"team": "payments"}
	agentA := r.credential(t, ctx, iss, "agent-a", payments)
	agentB := r.credential(t, ctx, iss, "agent-b", payments)
	other := r.credential(t, ctx, iss, "agent-c", map[string]any{"team": "search"})
	noTeamX := r.credential(t, ctx, iss, "x", nil)
	noTeamY := r.credential(t, ctx, iss, "y", nil)
	req := func() plog.Logs { return c.batch(span(0, 10)...) }

	runAuthSteps(t, r, []authStep{
		{"agent a (payments)", func() error { return agentA.grpc.SendLogs(agentA.ctx, req()) }, 10, 0, 0},
		{"agent b (payments), the same events", func() error { return agentB.http.SendLogs(ctx, req()) }, 10, 10, 0},
		{"agent c (search), the same event IDs", func() error { return other.grpc.SendLogs(other.ctx, req()) }, 20, 10, 0},
		{"a token without the claim", func() error { return noTeamX.grpc.SendLogs(noTeamX.ctx, req()) }, 30, 10, 10},
		{"another token without the claim", func() error { return noTeamY.http.SendLogs(ctx, req()) }, 30, 20, 20},
	})

	r.stop()
	wantEach(t, r.sink, c, span(0, 10), 3) // payments, search, no claim
}

// TestAuthenticatedWithoutPartition: the authenticator alone partitions
// nothing: without auth_attributes, an HA pair of agents with their own
// tokens sending the same events is deduplicated against each other.
func TestAuthenticatedWithoutPartition(t *testing.T) {
	iss := startIssuer(t)
	r := startCollector(t, nil, authConfig(iss, `
    logs:
      key: ['attributes["event.id"]']`))
	c, _ := eventCorpus(10)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	agentA := r.credential(t, ctx, iss, "agent-a", nil)
	agentB := r.credential(t, ctx, iss, "agent-b", nil)
	req := func() plog.Logs { return c.batch(span(0, 10)...) }

	runAuthSteps(t, r, []authStep{
		{"agent a", func() error { return agentA.grpc.SendLogs(agentA.ctx, req()) }, 10, 0, 0},
		{"agent b, the same events", func() error { return agentB.http.SendLogs(ctx, req()) }, 10, 10, 0},
	})
	r.stop()
	wantEachOnce(t, r.sink, c, span(0, 10))
}

// TestAuthAttributesWithoutAuthenticator: auth_attributes on a collector
// that runs no authenticator is refused at start, with the fix.
func TestAuthAttributesWithoutAuthenticator(t *testing.T) {
	out, _ := startFails(t, `
processors:
  dedup:
    auth_attributes: [subject]
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`)
	const want = `failed to start "dedup" processor: ` + "dedup: auth_attributes [subject] needs an authenticator, and the collector runs none: add one (e.g. oidc) to extensions and service.extensions and name it in the receivers' auth.authenticator, or remove auth_attributes"
	if !strings.Contains(out, want) {
		t.Errorf("collector output lacks %q:\n%s", want, out)
	}
}

// TestHeaderTenantsCanBeClaimed is the attack auth_attributes closes: with
// metadata_keys alone, a sender that sends another tenant's event IDs under
// that tenant's header first has the real events dropped as copies.
func TestHeaderTenantsCanBeClaimed(t *testing.T) {
	r := startCollector(t, nil, `
receivers:
  otlp:
    protocols:
      grpc:
        include_metadata: true
processors:
  dedup:
    metadata_keys: [X-Scope-OrgID]
    logs:
      key: ['attributes["event.id"]']
service:
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`)
	c, _ := eventCorpus(10)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s := r.grpcSender()
	asAcme := metadata.AppendToOutgoingContext(ctx, "X-Scope-OrgID", "acme")
	forged := c.batch(span(0, 10)...)
	for i := range 10 {
		forged.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(i).Body().SetStr("forged")
	}
	runAuthSteps(t, r, []authStep{
		{"mallory, acme's header and event IDs", func() error { return s.SendLogs(asAcme, forged) }, 10, 0, 0},
		{"acme's real events", func() error { return s.SendLogs(asAcme, c.batch(span(0, 10)...)) }, 10, 10, 0},
	})
	r.stop()
	counts, total := delivered(r.sink)
	if total != 10 {
		t.Errorf("sink received %d records, want 10 (mallory's only)", total)
	}
	for i := range 10 {
		if n := counts[c.recordKey(i)]; n != 0 {
			t.Errorf("acme's evt-%d delivered %d times; want 0: the attack this test shows", i, n)
		}
	}
}

// TestUnidentifiedByReason: tenant isolation that turns off is logged with
// the fix and counted by reason, against the real oidc extension: a
// receiver without auth (HTTP here) gives requests no identity at all, and
// an oidc without groups_claim gives auth_attributes: [membership] no value.
func TestUnidentifiedByReason(t *testing.T) {
	iss := startIssuer(t)
	r := startCollector(t, nil, fmt.Sprintf(`
extensions:
  oidc:
    providers:
      - issuer_url: %s
        audience: %s
receivers:
  otlp:
    protocols:
      grpc:
        auth: {authenticator: oidc}
processors:
  dedup:
    auth_attributes: [membership]
service:
  extensions: [health_check, oidc]
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [otlp_grpc/sink]
`, iss.URL, tokenAudience))
	c, _ := eventCorpus(10)
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	team := r.credential(t, ctx, iss, "team-a-agent", nil) // no groups claim
	mustSend(t, "gRPC with a token", team.grpc.SendLogs(team.ctx, c.batch(span(0, 10)...)))
	mustSend(t, "HTTP, no auth on that protocol", r.httpSender().SendLogs(ctx, c.batch(span(0, 4)...)))
	sc := r.scrape()
	for reason, want := range map[string]float64{"missing_attribute": 10, "unauthenticated": 4} {
		l := dedupLabels("dedup", "reason", reason)
		if got := sc.Sum("otelcol_processor_dedup_unidentified_records", l); got != want {
			t.Errorf("unidentified_records%v = %g, want %g", l, got, want)
		}
	}
	r.stop()
	for _, want := range []string{
		`dedup: a request reached dedup without an authenticated identity`,
		`Name the authenticator in auth.authenticator of every receiver of this pipeline`,
		`dedup: a request's authenticated identity has no value for an auth_attributes entry`,
		`"missing": "membership"`,
	} {
		if !strings.Contains(string(r.output()), want) {
			t.Errorf("the collector's log lacks %q", want)
		}
	}
}
