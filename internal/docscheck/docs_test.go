package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The Markdown files this package keeps true.
var docFiles = []string{
	"README.md",
	"CHANGELOG.md",
	"docs/monitoring.md",
	"docs/troubleshooting.md",
	"docs/versioning.md",
	"examples/README.md",
	"deploy/README.md",
}

// The Markdown files whose links TestDocLinks checks: the docs above, and
// the pages they link to that hold no collector config.
var linkedFiles = append(slices.Clip(docFiles),
	"BENCHMARKS.md",
	"RELIABILITY.md",
	"cmd/dedupload/README.md",
	"processor/dedupprocessor/README.md",
)

var fenceRE = regexp.MustCompile("(?s)```yaml\n(.*?)```")

// TestDocSnippetsValidate validates every YAML block of the docs that is a
// collector config or a fragment of one (it has processors, receivers,
// exporters, extensions or service at the top). A fragment is completed:
// an otlp receiver and otlp_grpc, otlp_http and debug exporters where it
// names none, and, unless it has its own pipelines, each dedup processor it
// defines in a logs, a traces and a metrics pipeline of its own. Other
// blocks (the ocb manifest, Prometheus config) are checked elsewhere or
// only parsed.
func TestDocSnippetsValidate(t *testing.T) {
	n := 0
	for _, file := range docFiles {
		text := string(readFile(t, file))
		for i, m := range fenceRE.FindAllStringSubmatch(text, -1) {
			var doc map[string]any
			if err := yaml.Unmarshal([]byte(m[1]), &doc); err != nil {
				t.Errorf("%s, yaml block %d: %v\n%s", file, i+1, err, m[1])
				continue
			}
			if !isCollectorConfig(doc) {
				continue
			}
			n++
			t.Run(fmt.Sprintf("%s#%d", file, i+1), func(t *testing.T) {
				full, err := completeConfig(doc)
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(t.TempDir(), "config.yaml")
				if err := os.WriteFile(p, full, 0o644); err != nil {
					t.Fatal(err)
				}
				if out, err := validate(t, p); err != nil {
					t.Errorf("validate: %v\n%s\nsnippet:\n%s\ncompleted:\n%s", err, out, m[1], full)
				}
			})
		}
	}
	// README.md: the recipes, the pipeline placement, shadow mode, Configure;
	// docs/monitoring.md: the telemetry reader. A new snippet updates this
	// count.
	if n != 5 {
		t.Errorf("found %d collector config snippets, want 5", n)
	}
}

func isCollectorConfig(doc map[string]any) bool {
	if _, ok := doc["dist"]; ok { // an ocb manifest
		return false
	}
	for _, k := range []string{"processors", "receivers", "exporters", "extensions", "service"} {
		if _, ok := doc[k]; ok {
			return true
		}
	}
	return false
}

func completeConfig(doc map[string]any) ([]byte, error) {
	section := func(name string) map[string]any {
		m, _ := doc[name].(map[string]any)
		if m == nil {
			m = map[string]any{}
			doc[name] = m
		}
		return m
	}
	receivers := section("receivers")
	if len(receivers) == 0 {
		receivers["otlp"] = map[string]any{"protocols": map[string]any{"grpc": map[string]any{"endpoint": "127.0.0.1:4317"}}}
	}
	exporters := section("exporters")
	if len(exporters) == 0 {
		exporters["debug"] = map[string]any{}
		exporters["otlp_grpc"] = map[string]any{"endpoint": "backend.example.internal:4317"}
		exporters["otlp_http"] = map[string]any{"endpoint": "http://backend.example.internal:4318"}
	}
	// Processors a fragment's pipelines use without defining them.
	processors := section("processors")
	for id, cfg := range map[string]any{
		"memory_limiter": map[string]any{"check_interval": "1s", "limit_percentage": 80, "spike_limit_percentage": 20},
		"batch":          map[string]any{},
	} {
		if _, ok := processors[id]; !ok {
			processors[id] = cfg
		}
	}
	service := section("service")
	if _, ok := service["pipelines"]; !ok {
		pipelines := map[string]any{}
		var ids []string
		for id := range processors {
			if id == "dedup" || strings.HasPrefix(id, "dedup/") {
				ids = append(ids, id)
			}
		}
		if len(ids) == 0 { // e.g. a telemetry block alone
			processors["dedup"] = nil
			ids = []string{"dedup"}
		}
		slices.Sort(ids)
		for i, id := range ids {
			for _, signal := range []string{"logs", "traces", "metrics"} {
				pipelines[fmt.Sprintf("%s/%d", signal, i)] = map[string]any{
					"receivers":  []string{"otlp"},
					"processors": []string{id},
					"exporters":  []string{"debug"},
				}
			}
		}
		service["pipelines"] = pipelines
	}
	if ext, ok := doc["extensions"].(map[string]any); ok && service["extensions"] == nil {
		var ids []string
		for id := range ext {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		service["extensions"] = ids
	}
	return yaml.Marshal(doc)
}

// TestDocLinks checks that every relative link of the docs names a file that
// exists, and every #anchor one of its headings or <a id>.
func TestDocLinks(t *testing.T) {
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	repo := root(t)
	for _, file := range linkedFiles {
		text := string(readFile(t, file))
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(link, "#")
			path := filepath.Join(repo, filepath.Dir(file), target)
			if target == "" {
				path = filepath.Join(repo, file)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
					continue
				}
				t.Errorf("%s links %s: %v", file, link, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !slices.Contains(anchors(string(b)), anchor) {
				t.Errorf("%s links %s: no heading or anchor %q in %s", file, link, anchor, target)
			}
		}
	}
}

// anchors returns the GitHub anchors of a Markdown text's headings and its
// <a id="..."> tags.
func anchors(md string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`<a id="([^"]+)"></a>`).FindAllStringSubmatch(md, -1) {
		out = append(out, m[1])
	}
	inFence := false
	for _, line := range strings.Split(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var b strings.Builder
		for _, r := range h {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('0' <= r && r <= '9'):
				b.WriteRune(r)
			}
		}
		out = append(out, b.String())
	}
	return out
}
