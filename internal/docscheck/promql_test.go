package docscheck

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// selector is what a PromQL expression says about the series it reads: the
// metric names it selects and, for each, the label names it matches on or
// aggregates by.
type queryRefs struct {
	metrics map[string]bool
	// labels used anywhere in the expression (matchers, by/without,
	// on/ignoring, group_left/right, label_replace targets excluded).
	labels map[string]bool
}

// promqlKeywords are identifiers that are not metric names.
var promqlKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"bool": true, "and": true, "or": true, "unless": true, "offset": true, "atan2": true,
	"inf": true, "nan": true,
}

// promqlAggregations may be followed by by/without before their "(".
var promqlAggregations = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "topk": true, "bottomk": true,
	"quantile": true, "stddev": true, "stdvar": true, "group": true, "count_values": true,
}

// promqlFunctions are the functions and aggregations the dashboard and rules
// may call; an identifier followed by "(" must be one of them.
var promqlFunctions = map[string]bool{
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "topk": true, "bottomk": true,
	"quantile": true, "stddev": true, "stdvar": true, "group": true, "count_values": true,
	"rate": true, "irate": true, "increase": true, "delta": true, "idelta": true, "deriv": true,
	"histogram_quantile": true, "clamp_min": true, "clamp_max": true, "clamp": true, "abs": true,
	"absent": true, "absent_over_time": true, "avg_over_time": true, "max_over_time": true,
	"min_over_time": true, "sum_over_time": true, "count_over_time": true, "last_over_time": true,
	"changes": true, "resets": true, "label_replace": true, "label_join": true, "vector": true,
	"scalar": true, "time": true, "timestamp": true, "round": true, "ceil": true, "floor": true,
	"sort": true, "sort_desc": true, "label_values": true, // label_values: Grafana variable queries
}

// parseQuery extracts the metric and label names of a PromQL expression with
// a small lexer: enough to check names against a scrape (promtool checks the
// grammar). It fails on unbalanced brackets, unknown functions and
// unterminated strings.
func parseQuery(expr string) (queryRefs, error) {
	refs := queryRefs{metrics: map[string]bool{}, labels: map[string]bool{}}
	var stack []byte
	// labelList: inside the parentheses after by/without/on/ignoring/group_*.
	labelList := false
	// Inside {...} (inBraces below), the next identifier is a label name.
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for j < len(expr) && expr[j] != c {
				if expr[j] == '\\' && c != '`' {
					j++
				}
				j++
			}
			if j >= len(expr) {
				return refs, fmt.Errorf("unterminated string at %d in %q", i, expr)
			}
			i = j + 1
		case c == '(' || c == '{' || c == '[':
			stack = append(stack, c)
			i++
		case c == ')' || c == '}' || c == ']':
			open := map[byte]byte{')': '(', '}': '{', ']': '['}[c]
			if len(stack) == 0 || stack[len(stack)-1] != open {
				return refs, fmt.Errorf("unbalanced %q at %d in %q", c, i, expr)
			}
			stack = stack[:len(stack)-1]
			if c == ')' {
				labelList = false
			}
			i++
		case len(stack) > 0 && stack[len(stack)-1] == '[':
			// A range or subquery: durations, ':' and digits.
			i++
		case unicode.IsDigit(rune(c)) || c == '.':
			// A number or a duration (0.99, 1e3, 1h).
			for i < len(expr) && (expr[i] == '.' || unicode.IsLetter(rune(expr[i])) || unicode.IsDigit(rune(expr[i]))) {
				i++
			}
		case c == '_' || unicode.IsLetter(rune(c)):
			j := i
			for j < len(expr) && (expr[j] == '_' || expr[j] == ':' || unicode.IsLetter(rune(expr[j])) || unicode.IsDigit(rune(expr[j]))) {
				j++
			}
			id := expr[i:j]
			k := j
			for k < len(expr) && (expr[k] == ' ' || expr[k] == '\n' || expr[k] == '\t') {
				k++
			}
			next := byte(0)
			if k < len(expr) {
				next = expr[k]
			}
			inBraces := len(stack) > 0 && stack[len(stack)-1] == '{'
			switch {
			case inBraces || labelList:
				refs.labels[id] = true
			case id == "by" || id == "without" || id == "on" || id == "ignoring" || id == "group_left" || id == "group_right":
				if next == '(' {
					stack = append(stack, '(')
					labelList = true
					j = k + 1
				}
			case promqlKeywords[strings.ToLower(id)]:
			case promqlAggregations[id]:
			case next == '(':
				if !promqlFunctions[id] {
					return refs, fmt.Errorf("unknown function %q in %q", id, expr)
				}
			default:
				refs.metrics[id] = true
			}
			i = j
		default:
			i++
		}
	}
	if len(stack) > 0 {
		return refs, fmt.Errorf("unclosed %q in %q", stack, expr)
	}
	return refs, nil
}

func TestParseQuery(t *testing.T) {
	for _, tc := range []struct {
		expr            string
		metrics, labels []string
		err             bool
	}{
		{
			expr:    `sum by (otel_signal, caught_by) (rate(otelcol_processor_dedup_duplicates{processor=~"a|b", job!=""}[5m]))`,
			metrics: []string{"otelcol_processor_dedup_duplicates"},
			labels:  []string{"caught_by", "job", "otel_signal", "processor"},
		},
		{
			expr:    `histogram_quantile(0.99, sum by (le, op) (rate(x_bucket[$__rate_interval]))) > on (op) group_left y:rate5m`,
			metrics: []string{"x_bucket", "y:rate5m"},
			labels:  []string{"le", "op"},
		},
		{expr: `max(a) == 2 and b offset 1h`, metrics: []string{"a", "b"}, labels: nil},
		{expr: `sum(rate(a[5m])`, err: true},
		{expr: `frobnicate(a)`, err: true},
		{expr: `a{x="unterminated}`, err: true},
	} {
		refs, err := parseQuery(tc.expr)
		if tc.err {
			if err == nil {
				t.Errorf("%q: no error", tc.expr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.expr, err)
			continue
		}
		if got := sortedKeys(refs.metrics); !slices.Equal(got, tc.metrics) {
			t.Errorf("%q: metrics %v, want %v", tc.expr, got, tc.metrics)
		}
		if got := sortedKeys(refs.labels); !slices.Equal(got, tc.labels) {
			t.Errorf("%q: labels %v, want %v", tc.expr, got, tc.labels)
		}
	}
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
