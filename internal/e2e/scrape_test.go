package e2e

import (
	"strings"
	"testing"
)

func TestParsePrometheusText(t *testing.T) {
	const text = `# HELP otelcol_processor_dedup_records Records the dedup processor saw.
# TYPE otelcol_processor_dedup_records counter
otelcol_processor_dedup_records{otel_signal="logs",outcome="unique",processor="dedup"} 100
otelcol_processor_dedup_records{otel_signal="logs",outcome="duplicate",processor="dedup"} 40
otelcol_processor_dedup_records{otel_signal="logs",outcome="unique",processor="dedup/keyed"} 7
odd{a="x\"y\\z\n",b=""} 1.5e+06 1700000000000
up 1
`
	sc, err := ParsePrometheusText(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(sc) != 5 {
		t.Fatalf("parsed %d series, want 5: %v", len(sc), sc)
	}
	if got := sc.Sum("otelcol_processor_dedup_records", Labels{"processor": "dedup"}); got != 140 {
		t.Errorf("sum for processor dedup = %g, want 140", got)
	}
	if got := sc.Sum("otelcol_processor_dedup_records", Labels{"outcome": "unique"}); got != 107 {
		t.Errorf("sum for outcome unique = %g, want 107", got)
	}
	if got := sc.Sum("otelcol_processor_dedup_records", Labels{"outcome": "missing_key"}); got != 0 {
		t.Errorf("sum for an absent series = %g, want 0", got)
	}
	odd := sc.Find("odd", nil)
	if len(odd) != 1 || odd[0].Labels["a"] != "x\"y\\z\n" || odd[0].Labels["b"] != "" || odd[0].Value != 1.5e6 {
		t.Errorf("escaped labels parsed as %#v", odd)
	}
	if got := sc.Sum("up", nil); got != 1 {
		t.Errorf("up = %g, want 1", got)
	}
	for _, bad := range []string{`x{a="1"`, `x{a=1} 1`, `x{a="1"} one`, `x`} {
		if _, err := ParsePrometheusText(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}
