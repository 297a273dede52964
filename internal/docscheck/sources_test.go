package docscheck

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"gopkg.in/yaml.v3"

	"github.com/otelcol-dedup/otelcol-dedup/internal/e2e"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// copiesLine is the message of the processor's line about a source's copies.
const copiesLine = "dedup: a source sent copies of records already delivered"

// sourceLogs is a request of a sender whose resource's service.name is
// service, with records n in [from, to).
func sourceLogs(service string, from, to int) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", service)
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for n := from; n < to; n++ {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(pcommon.NewTimestampFromTime(t0))
		lr.Body().SetStr(fmt.Sprintf("%s record %d", service, n))
	}
	return ld
}

// loggedLine is one JSON line of the collector's log.
type loggedLine map[string]any

// seconds reads a duration field as the collector writes it (seconds, or a
// duration string).
func (l loggedLine) seconds(field string) float64 {
	switch v := l[field].(type) {
	case float64:
		return v
	case string:
		d, _ := time.ParseDuration(v)
		return d.Seconds()
	}
	return -1
}

// at reads the line's time (epoch seconds, or an ISO 8601 string).
func (l loggedLine) at() time.Time {
	switch v := l["ts"].(type) {
	case float64:
		return time.Unix(0, int64(v*1e9))
	case string:
		if t, err := time.Parse("2006-01-02T15:04:05.000Z0700", v); err == nil {
			return t
		}
		t, _ := time.Parse(time.RFC3339Nano, v)
		return t
	}
	return time.Time{}
}

// copiesLines returns the collector's lines about copies, in order.
func (c *collector) copiesLines() []loggedLine {
	c.t.Helper()
	b, err := os.ReadFile(c.log)
	if err != nil {
		c.t.Fatal(err)
	}
	var out []loggedLine
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var l loggedLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l["msg"] == copiesLine {
			out = append(out, l)
		}
	}
	return out
}

// TestCopiesTracedToTheirSourceByTheBinary: two senders through the binary
// (source.key left at its default, service.name), one of which re-sends: a
// double send within a second, then retries over a second later. The scrape
// names the sender and counts its copies against its records; the age
// histogram puts the double send and the retries in buckets apart; the log
// has one line per interval about it. Then the dashboard's and the alert's
// queries, run by promtool over the scrape's series (each value taken as a
// minute's increase, for an hour), name it too. (An hour-later replay
// needs a clock the binary does not have: the processor's tests play it on
// a fake one.)
func TestCopiesTracedToTheirSourceByTheBinary(t *testing.T) {
	const interval = 2 * time.Second
	sink := newSink(t)
	c := startCollector(t, nil, nil, configYAML(t, e2e.Config("normal", sink, e2e.Ports{})), fmt.Sprintf(`
processors:
  dedup:
    source:
      log_interval: %s
service:
  telemetry:
    logs:
      encoding: json
  pipelines:
    logs:
      receivers: [otlp]
      processors: [dedup]
      exporters: [%s]
`, interval, e2e.SinkGRPCExporter))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	s := c.grpcSender()
	send := func(ld plog.Logs) {
		t.Helper()
		if err := s.SendLogs(ctx, ld); err != nil {
			t.Fatal(err)
		}
	}
	lines := func(n int) []loggedLine {
		t.Helper()
		var got []loggedLine
		testkit.WaitFor(t, fmt.Sprintf("%d line(s) about copies", n), opTimeout, func() bool {
			got = c.copiesLines()
			return len(got) >= n
		})
		return got
	}

	send(sourceLogs("checkout", 0, 10))
	send(sourceLogs("billing", 0, 10))
	send(sourceLogs("billing", 0, 10)) // a double send: billing is named from here on
	named := time.Now()
	time.Sleep(1200 * time.Millisecond)
	send(sourceLogs("billing", 0, 10)) // a retry
	time.Sleep(time.Until(named.Add(interval + 200*time.Millisecond)))
	send(sourceLogs("checkout", 10, 11)) // any batch logs the lines due
	first := lines(1)[0]
	send(sourceLogs("billing", 0, 10)) // another retry, in the next interval
	time.Sleep(time.Until(first.at().Add(interval + 200*time.Millisecond)))
	send(sourceLogs("checkout", 11, 12))
	second := lines(2)[1]

	if got := sink.LogRecordCount(); got != 22 {
		t.Errorf("sink got %d records, want 22 (12 of checkout, 10 of billing)", got)
	}
	sc := c.scrape()
	l := func(kv ...string) e2e.Labels {
		m := e2e.Labels{"processor": "dedup", "otel_signal": "logs"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, w := range []struct {
		name   string
		labels e2e.Labels
		value  float64
	}{
		// billing's first request, before its first copy, counts as (other).
		{"otelcol_processor_dedup_source_duplicates", l("source", "billing"), 30},
		{"otelcol_processor_dedup_source_records", l("source", "billing"), 30},
		{"otelcol_processor_dedup_source_duplicates", l("source", "(other)"), 0},
		{"otelcol_processor_dedup_source_records", l("source", "(other)"), 22},
		{"otelcol_processor_dedup_source_duplicates", l("source", "checkout"), 0},
		// The double send within a second, the retries between 1 s and 5 s.
		{"otelcol_processor_dedup_duplicate_age_bucket", l("caught_by", "local", "le", "1"), 10},
		{"otelcol_processor_dedup_duplicate_age_bucket", l("caught_by", "local", "le", "5"), 30},
		{"otelcol_processor_dedup_duplicate_age_count", l("caught_by", "local"), 30},
	} {
		if got := sc.Sum(w.name, w.labels); got != w.value {
			t.Errorf("%s%v = %g, want %g; series: %v", w.name, w.labels, got, w.value, sc.Find(w.name, l()))
		}
	}

	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for i, w := range []struct {
		copies float64
		cause  string
		ages   func(lo, hi float64) bool
	}{
		{20, "mixed: see otelcol_processor_dedup_duplicate_age", func(lo, hi float64) bool { return lo < 1 && hi > 1 && hi <= 5 }},
		{10, "retries (1s to 5m)", func(lo, hi float64) bool { return lo > 1 && hi <= 5 }},
	} {
		got := []loggedLine{first, second}[i]
		lo, hi := got.seconds("age_min"), got.seconds("age_max")
		if got["source"] != "billing" || got["copies"] != w.copies || got["records"] != w.copies || got["cause"] != w.cause ||
			!w.ages(lo, hi) || !hex.MatchString(fmt.Sprint(got["example_identity"])) {
			t.Errorf("line %d: %v\nwant source billing, %g copies of %g records, %s, ages %gs to %gs, a 32-digit identity", i+1, got, w.copies, w.copies, w.cause, lo, hi)
		}
	}
	if gap := second.at().Sub(first.at()); gap < interval {
		t.Errorf("lines %s apart, want at least the interval, %s", gap, interval)
	}
	c.stop()
	if got := c.copiesLines(); len(got) != 2 {
		t.Errorf("%d lines about copies, want 2 (billing's, one an interval): %v", len(got), got)
	}

	queriesNameTheSource(t, sc)
}

// queriesNameTheSource runs the dashboard's copies panels and the rules over
// the scrape's source and age series with promtool: each series rises by
// its scraped value every minute for an hour (so a rate is that value per
// second), on one instance of job otelcol. The panels name billing and split
// its copies by age; OtelcolDedupSourceSendingCopies fires for billing alone.
func queriesNameTheSource(t *testing.T, sc e2e.Scrape) {
	t.Helper()
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	var input []series
	for _, s := range sc {
		if !strings.HasPrefix(s.Name, "otelcol_processor_dedup_source_") && !strings.HasPrefix(s.Name, "otelcol_processor_dedup_duplicate_age_") {
			continue
		}
		labels := map[string]string{"job": "otelcol", "instance": "gw-1:8888"}
		for k, v := range s.Labels {
			labels[k] = v
		}
		var pairs []string
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			pairs = append(pairs, k+"="+strconv.Quote(labels[k]))
		}
		input = append(input, series{Series: s.Name + "{" + strings.Join(pairs, ",") + "}", Values: fmt.Sprintf("0+%gx60", s.Value*60)})
	}

	type sample struct {
		Labels string  `yaml:"labels"`
		Value  float64 `yaml:"value"`
	}
	type exprTest struct {
		Expr       string   `yaml:"expr"`
		EvalTime   string   `yaml:"eval_time"`
		ExpSamples []sample `yaml:"exp_samples"`
	}
	want := map[string][]map[string]float64{ // by panel, per target: by the sample's labels
		"Top sources of copies":                          {{`{source="billing"}`: 30, `{source="(other)"}`: 0}},
		"Share of each source's records that are copies": {{`{source="billing"}`: 1}},
		"Copies by age":                                  {{`{}`: 10}, {`{}`: 20}, {`{}`: 0}},
	}
	var exprs []exprTest
	for _, p := range loadDashboard(t).Panels {
		targets, ok := want[p.Title]
		if !ok {
			continue
		}
		delete(want, p.Title)
		if len(p.Targets) != len(targets) {
			t.Fatalf("panel %q has %d queries, want %d", p.Title, len(p.Targets), len(targets))
		}
		for i, tg := range p.Targets {
			// Rounded to 1/1024: promtool compares exactly, and its rate
			// of a steady series is off by an ulp.
			et := exprTest{Expr: "round(" + grafanaVars.Replace(tg.Expr) + ", 1/1024)", EvalTime: "40m"}
			for _, labels := range slices.Sorted(maps.Keys(targets[i])) {
				et.ExpSamples = append(et.ExpSamples, sample{Labels: labels, Value: targets[i][labels]})
			}
			exprs = append(exprs, et)
		}
	}
	if len(want) > 0 {
		t.Fatalf("the dashboard has no panels %v", slices.Collect(maps.Keys(want)))
	}

	var description string
	for _, r := range loadRules(t) {
		if r.Alert == "OtelcolDedupSourceSendingCopies" {
			description = r.Annotations["description"]
		}
	}
	test := map[string]any{
		"rule_files":          []string{filepath.Join(root(t), rulesFile)},
		"evaluation_interval": "1m",
		"tests": []any{map[string]any{
			"interval":         "1m",
			"input_series":     input,
			"promql_expr_test": exprs,
			"alert_rule_test": []any{map[string]any{
				"alertname": "OtelcolDedupSourceSendingCopies",
				"eval_time": "40m",
				"exp_alerts": []any{map[string]any{
					"exp_labels": map[string]string{"severity": "warning", "job": "otelcol", "processor": "dedup", "otel_signal": "logs", "source": "billing"},
					"exp_annotations": map[string]string{
						"summary":     "dedup (logs): 100% of what billing sends are copies",
						"description": description,
					},
				}},
			}},
		}},
	}
	b, err := yaml.Marshal(test)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "copies.test.yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, root(t), nil, promtool(t), "test", "rules", path)
	if err != nil || !strings.Contains(out, "SUCCESS") {
		t.Fatalf("promtool test rules over the binary's series: %v\n%s\n%s", err, out, b)
	}
}
