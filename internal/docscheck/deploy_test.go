package docscheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const (
	dashboardFile = "deploy/grafana/otelcol-dedup.json"
	rulesFile     = "deploy/prometheus/otelcol-dedup-rules.yaml"
	rulesTestFile = "deploy/prometheus/otelcol-dedup-rules.test.yaml"
)

// The processor's series, exactly as the binary exports them with the
// collector's default telemetry reader (metrics_test.go checks it).
var processorMetrics = []string{
	"otelcol_processor_dedup_records",
	"otelcol_processor_dedup_duplicates",
	"otelcol_processor_dedup_cache_entries",
	"otelcol_processor_dedup_cache_bytes",
	"otelcol_processor_dedup_cache_evictions",
	"otelcol_processor_dedup_released",
	"otelcol_processor_dedup_redis_requests",
	"otelcol_processor_dedup_redis_duration_bucket",
	"otelcol_processor_dedup_redis_duration_sum",
	"otelcol_processor_dedup_redis_duration_count",
	"otelcol_processor_dedup_redis_breaker_state",
	"otelcol_processor_dedup_elections",
	"otelcol_processor_dedup_election_undecided",
	"otelcol_processor_dedup_elected_replica",
	"otelcol_processor_dedup_source_duplicates",
	"otelcol_processor_dedup_source_records",
	"otelcol_processor_dedup_duplicate_age_bucket",
	"otelcol_processor_dedup_duplicate_age_sum",
	"otelcol_processor_dedup_duplicate_age_count",
}

// scrapeLabels are the labels Prometheus adds to every scraped series.
var scrapeLabels = []string{"job", "instance"}

// --- the dashboard ---

type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
			Query      any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardFile), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// grafanaVars replaces the dashboard's variables with values that make each
// query plain PromQL: every job, processor and signal, a 5m rate window.
var grafanaVars = strings.NewReplacer(
	"$__rate_interval", "5m",
	"$__interval", "1m",
	"$__range", "1h",
	"$max_entries", "1000000",
	"$job", ".*",
	"$processor", ".*",
	"$signal", ".*",
)

// namedQuery is one PromQL expression and where it comes from.
type namedQuery struct {
	where string
	expr  string
	// extraLabels: label names used outside the expression (label_values'
	// second argument).
	extraLabels []string
}

var labelValuesRE = regexp.MustCompile(`^label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// dashboardQueries returns every query of the dashboard, panels and
// variables, with the variables replaced.
func dashboardQueries(t *testing.T, d dashboard) []namedQuery {
	t.Helper()
	var out []namedQuery
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValuesRE.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(<selector>, <label>)", v.Name, v.Definition)
			continue
		}
		out = append(out, namedQuery{where: "variable " + v.Name, expr: grafanaVars.Replace(m[1]), extraLabels: []string{m[2]}})
	}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			out = append(out, namedQuery{where: fmt.Sprintf("panel %q %s", p.Title, tg.RefID), expr: grafanaVars.Replace(tg.Expr)})
		}
	}
	return out
}

func TestDashboardStructure(t *testing.T) {
	d := loadDashboard(t)
	if d.UID != "otelcol-dedup" || d.Title == "" {
		t.Errorf("uid %q title %q", d.UID, d.Title)
	}
	vars := map[string]bool{"__rate_interval": true, "__interval": true, "__range": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	for _, want := range []string{"datasource", "job", "processor", "signal", "max_entries"} {
		if !vars[want] {
			t.Errorf("variable %s missing", want)
		}
	}
	ids := map[int]bool{}
	varRE := regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)
	var titles []string
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X < 0 || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		titles = append(titles, p.Title)
		if p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: datasource %+v, want prometheus ${datasource}", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" || tg.RefID == "" || refs[tg.RefID] {
				t.Errorf("panel %q: empty query or refId %q empty or repeated", p.Title, tg.RefID)
			}
			refs[tg.RefID] = true
			for _, m := range varRE.FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[m[1]] {
					t.Errorf("panel %q: variable $%s is not defined", p.Title, m[1])
				}
			}
		}
	}
	// What the issue asks the dashboard to show.
	for _, want := range []string{
		"Duplicate rate by what caught them and signal", "Records by outcome", "Cache fill (entries / cache.max_entries)",
		"Early evictions /s", "Redis latency by op (p50, p99)", "Redis round trips by op and result",
		"Breaker state by instance and Redis node", "Keys released after failed deliveries /s",
		"Top sources of copies", "Copies by age",
	} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q; panels: %q", want, titles)
		}
	}
	// Every series the processor exports is on the dashboard.
	used := map[string]bool{}
	for _, q := range dashboardQueries(t, d) {
		refs, err := parseQuery(q.expr)
		if err != nil {
			t.Errorf("%s: %v", q.where, err)
			continue
		}
		for m := range refs.metrics {
			used[m] = true
		}
	}
	for _, m := range processorMetrics {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}
}

// --- the rules ---

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	dec := yaml.NewDecoder(strings.NewReader(string(readFile(t, rulesFile))))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", rulesFile, err)
	}
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	return out
}

// recorded maps each recording rule's name to its expression.
func recorded(rules []rule) map[string]string {
	m := map[string]string{}
	for _, r := range rules {
		if r.Record != "" {
			m[r.Record] = r.Expr
		}
	}
	return m
}

func TestRulesStructure(t *testing.T) {
	rules := loadRules(t)
	trouble := string(readFile(t, "docs/troubleshooting.md"))
	anchorRE := regexp.MustCompile(`docs/troubleshooting\.md#([a-z0-9-]+)`)
	var alerts []string
	for _, r := range rules {
		if (r.Record == "") == (r.Alert == "") {
			t.Errorf("rule %+v: exactly one of record and alert", r)
			continue
		}
		if _, err := parseQuery(r.Expr); err != nil {
			t.Errorf("%s%s: %v", r.Record, r.Alert, err)
		}
		if r.Record != "" {
			continue
		}
		alerts = append(alerts, r.Alert)
		if r.For == "" {
			t.Errorf("alert %s has no `for`", r.Alert)
		}
		if s := r.Labels["severity"]; s != "info" && s != "warning" && s != "critical" {
			t.Errorf("alert %s: severity %q, want info, warning or critical", r.Alert, s)
		}
		if r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
			t.Errorf("alert %s: summary and description are required", r.Alert)
		}
		m := anchorRE.FindStringSubmatch(r.Annotations["description"])
		if m == nil {
			t.Errorf("alert %s: the description does not point to docs/troubleshooting.md#...", r.Alert)
		} else if !strings.Contains(trouble, `<a id="`+m[1]+`"></a>`) {
			t.Errorf("alert %s points to docs/troubleshooting.md#%s, which has no such anchor", r.Alert, m[1])
		}
	}
	want := []string{
		"OtelcolDedupCacheEvictingEarly", "OtelcolDedupDuplicateRatioHigh", "OtelcolDedupDuplicateRatioSpike",
		"OtelcolDedupKeyErrors", "OtelcolDedupRedisBreakerOpen", "OtelcolDedupRedisErrors",
		"OtelcolDedupRedisSlow", "OtelcolDedupReleasesClimbing", "OtelcolDedupSourceSendingCopies",
	}
	slices.Sort(alerts)
	if !slices.Equal(alerts, want) {
		t.Errorf("alerts %q, want %q", alerts, want)
	}
	// Each alert is exercised by the promtool unit tests.
	tests := string(readFile(t, rulesTestFile))
	for _, a := range want {
		if !strings.Contains(tests, "alertname: "+a+"\n") {
			t.Errorf("%s has no test in %s", a, rulesTestFile)
		}
	}
}

// --- promtool ---

// promtool returns the path of the promtool that make deps extracts from
// Debian's prometheus package ($PROMTOOL, else bin/promtool), or fails the
// test. A promtool on PATH is not used: its version is unknown.
func promtool(t *testing.T) string {
	t.Helper()
	p := os.Getenv("PROMTOOL")
	if p == "" {
		p = filepath.Join(root(t), "bin", "promtool")
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("promtool missing (%v): run `make deps`", err)
	}
	return p
}

func TestPromtoolCheckRules(t *testing.T) {
	pt := promtool(t)
	out, err := run(t, root(t), nil, pt, "check", "rules", rulesFile)
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	want := fmt.Sprintf("SUCCESS: %d rules found", len(loadRules(t)))
	if !strings.Contains(out, want) {
		t.Errorf("promtool check rules said:\n%s\nwant %q", out, want)
	}
}

func TestPromtoolTestRules(t *testing.T) {
	pt := promtool(t)
	out, err := run(t, root(t), nil, pt, "test", "rules", rulesTestFile)
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
}

// TestPromtoolDashboardQueries has promtool parse every dashboard query, as
// recording rules of a generated file.
func TestPromtoolDashboardQueries(t *testing.T) {
	pt := promtool(t)
	qs := dashboardQueries(t, loadDashboard(t))
	type rec struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var recs []rec
	for i, q := range qs {
		recs = append(recs, rec{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: q.expr})
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": recs}}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "dashboard-queries.yaml")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, root(t), nil, pt, "check", "rules", p)
	if err != nil {
		t.Fatalf("promtool rejects a dashboard query: %v\n%s", err, out)
	}
	if want := fmt.Sprintf("SUCCESS: %d rules found", len(qs)); !strings.Contains(out, want) {
		t.Errorf("promtool check rules said:\n%s\nwant %q", out, want)
	}
}
