package docscheck

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"
	"gopkg.in/yaml.v3"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor"
)

// The Markdown files whose YAML blocks this package checks (see doc.go for
// the rule each block follows).
var docFiles = []string{
	"README.md",
	"CHANGELOG.md",
	"processor/dedupprocessor/README.md",
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
)

// fenceRE matches a YAML block and the docscheck mark on the line before
// it, if any: <!-- docscheck: KIND [ARG...] -->.
var fenceRE = regexp.MustCompile("(?s)(?:<!-- docscheck: ([a-z-]+)([^>]*?) -->\n)?```yaml\n(.*?)```")

// docBlock is one YAML block of the docs.
type docBlock struct {
	file string
	n    int    // 1-based, in its file
	mark string // the docscheck mark's kind; "" for none
	arg  string // the mark's argument
	text string
}

func (b docBlock) String() string { return fmt.Sprintf("%s#%d", b.file, b.n) }

func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	var out []docBlock
	for _, file := range docFiles {
		text := string(readFile(t, file))
		for i, m := range fenceRE.FindAllStringSubmatch(text, -1) {
			out = append(out, docBlock{file: file, n: i + 1, mark: m[1], arg: strings.TrimSpace(m[2]), text: m[3]})
		}
	}
	return out
}

// TestDocSnippetsValidate checks every YAML block of the docs, by the rule
// of doc.go: a collector config or fragment is completed and validated by
// the distribution; a block of a dedup processor's settings alone is
// validated as the settings of one dedup processor; a block marked
// `ocb` is left to TestOCBManifestBuildsFromCleanDir, which validates it
// with the binary the README's manifest builds; a block marked `needs X`
// must be refused by the distribution for lacking component X (so the mark
// stays true); a block marked `prometheus` is a Prometheus config, checked
// by promtool; an ocb manifest must be the tested one. Any other block
// fails the test.
func TestDocSnippetsValidate(t *testing.T) {
	counts := map[string]int{}
	for _, b := range docBlocks(t) {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(b.text), &doc); err != nil {
			t.Errorf("%s: %v\n%s", b, err, b.text)
			continue
		}
		kind := b.mark
		switch {
		case kind != "":
		case doc["dist"] != nil:
			kind = "manifest"
		case isCollectorConfig(doc):
			kind = "collector"
		case isDedupSettings(doc):
			kind = "settings"
		default:
			t.Errorf("%s is neither a collector config, a dedup processor's settings, nor marked (see doc.go):\n%s", b, b.text)
			continue
		}
		counts[kind]++
		switch kind {
		case "ocb":
			if b.file != "README.md" {
				t.Errorf("%s: only README.md's \"Put dedup in your own collector\" block is validated by the ocb manifest's binary", b)
			}
			continue
		case "manifest":
			if strings.TrimSpace(b.text) != strings.TrimSpace(manifestBody(t)) {
				t.Errorf("%s is an ocb manifest but not %s from `dist:` on", b, ocbManifest)
			}
			continue
		case "prometheus":
			t.Run(b.String(), func(t *testing.T) { promtoolCheckConfig(t, b.text) })
			continue
		case "settings":
			doc = map[string]any{"processors": map[string]any{"dedup": doc}}
		case "collector", "needs":
		default:
			t.Errorf("%s: unknown docscheck mark %q (see doc.go)", b, b.mark)
			continue
		}
		t.Run(b.String(), func(t *testing.T) {
			full, err := completeConfig(doc)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(p, full, 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := validate(t, p)
			if kind == "needs" {
				// The distribution must refuse it for the component named.
				if err == nil || b.arg == "" || !strings.Contains(out, "unknown type: \""+b.arg+"\"") {
					t.Errorf("marked as needing %q, which the distribution lacks, but validate said (%v):\n%s", b.arg, err, out)
				}
				return
			}
			if err != nil {
				t.Errorf("validate: %v\n%s\nsnippet:\n%s\ncompleted:\n%s", err, out, b.text, full)
			}
			for _, p := range promiseBreaches(t, full) {
				t.Errorf("%s", p)
			}
		})
	}
	// A new block updates these counts.
	want := map[string]int{"collector": 11, "settings": 1, "ocb": 1, "manifest": 1, "needs": 1, "prometheus": 1}
	if !maps.Equal(counts, want) {
		t.Errorf("YAML blocks by kind: %v, want %v", counts, want)
	}
}

// isDedupSettings says whether a block is the settings of one dedup
// processor (e.g. a `logs:` block alone).
func isDedupSettings(doc map[string]any) bool {
	if len(doc) == 0 {
		return false
	}
	for k := range doc {
		switch k {
		case "window", "action", "mark_attribute", "identity_attribute", "on_missing_key", "cache", "storage",
			"snapshot_interval", "pending_wait", "metadata_keys", "logs", "traces", "metrics", "redis":
		default:
			return false
		}
	}
	return true
}

// promtoolCheckConfig checks a Prometheus config with promtool.
func promtoolCheckConfig(t *testing.T, text string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, root(t), nil, promtool(t), "check", "config", "--syntax-only", p); err != nil {
		t.Errorf("promtool check config: %v\n%s", err, out)
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
	if _, ok := exporters["debug"]; !ok {
		exporters["debug"] = map[string]any{} // the completed pipelines' exporter
	}
	if len(exporters) == 1 {
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

// TestEverySettingDocumented: every setting of the processor's Config (its
// mapstructure path) is in docs/versioning.md's stability table and in the
// component README's configuration table.
func TestEverySettingDocumented(t *testing.T) {
	var paths []string
	settingPaths(reflect.TypeFor[dedupprocessor.Config](), "", &paths)
	if len(paths) < 30 {
		t.Fatalf("found only %d settings: %q", len(paths), paths)
	}
	for _, file := range []string{"docs/versioning.md", "processor/dedupprocessor/README.md"} {
		var table strings.Builder
		for _, line := range strings.Split(string(readFile(t, file)), "\n") {
			if strings.HasPrefix(line, "| `") {
				table.WriteString(line + "\n")
			}
		}
		for _, p := range paths {
			if !strings.Contains(table.String(), "`"+p+"`") {
				t.Errorf("%s: no table row names `%s`", file, p)
			}
		}
	}
}

// settingPaths appends the dotted mapstructure path of every setting of t:
// the processor's own structs (and configoptional.Optional of them) are
// walked, other types (configtls, component.ID) are one setting.
func settingPaths(t reflect.Type, prefix string, out *[]string) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if opts == "squash" {
			settingPaths(ft, prefix, out)
			continue
		}
		path := prefix + name
		if strings.HasPrefix(ft.PkgPath(), "go.opentelemetry.io/collector/config/configoptional") && ft.Kind() == reflect.Struct {
			// Optional[T]: its one field holds the T.
			for j := range ft.NumField() {
				if inner := ft.Field(j).Type; inner.Kind() == reflect.Struct && inner.PkgPath() != ft.PkgPath() {
					ft = inner
					break
				}
			}
		}
		if ft.Kind() == reflect.Struct && ft.PkgPath() == reflect.TypeFor[dedupprocessor.Config]().PkgPath() {
			if strings.Contains(ft.String(), "Optional") || name == "redis" || name == "replica_election" {
				*out = append(*out, path) // present or absent: a setting of its own
			}
			settingPaths(ft, path+".", out)
			continue
		}
		*out = append(*out, path)
	}
}

// TestReadmeDefaults: the component README's configuration table gives
// each setting the default the processor really has (with the optional
// sections, redis and metrics.replica_election, present).
func TestReadmeDefaults(t *testing.T) {
	cfg := dedupprocessor.NewFactory().CreateDefaultConfig().(*dedupprocessor.Config)
	present := confmap.NewFromStringMap(map[string]any{
		"redis":   map[string]any{"endpoints": []any{"redis.internal:6379"}},
		"metrics": map[string]any{"replica_election": map[string]any{}},
	})
	if err := present.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	settingValues(reflect.ValueOf(cfg).Elem(), "", got)
	rowRE := regexp.MustCompile("^\\| ((?:`[a-z_.]+`(?:, )?)+) \\| `([^`]*)` \\|")
	checked := 0
	for _, line := range strings.Split(string(readFile(t, "processor/dedupprocessor/README.md")), "\n") {
		m := rowRE.FindStringSubmatch(line)
		if m == nil || strings.Contains(m[2], "<") {
			continue
		}
		for _, name := range strings.Split(m[1], ", ") {
			name = strings.Trim(name, "`")
			v, ok := got[name]
			if !ok {
				t.Errorf("README: `%s` has a default but is no setting", name)
				continue
			}
			checked++
			doc := m[2]
			if doc == `""` {
				doc = ""
			}
			if d, err := time.ParseDuration(doc); err == nil && strings.HasPrefix(v, "duration ") {
				doc = "duration " + d.String()
			}
			if v != doc {
				t.Errorf("README: `%s` defaults to `%s`; the processor's default is %q", name, m[2], v)
			}
		}
	}
	if checked < 25 {
		t.Errorf("checked only %d defaults", checked)
	}
}

// settingValues records the value of every leaf setting of v by its dotted
// path: durations as time.Duration.String(), lists as [] when empty.
func settingValues(v reflect.Value, prefix string, out map[string]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("mapstructure")
		if tag == "" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if opts == "squash" {
			settingValues(fv, prefix, out)
			continue
		}
		path := prefix + name
		if get := fv.Addr().MethodByName("Get"); get.IsValid() && strings.Contains(fv.Type().String(), "Optional") {
			if p := get.Call(nil)[0]; !p.IsNil() && p.Elem().Kind() == reflect.Struct && p.Elem().Type().PkgPath() == t.PkgPath() {
				settingValues(p.Elem(), path+".", out)
			}
			continue
		}
		if fv.Kind() == reflect.Struct && fv.Type().PkgPath() == t.PkgPath() {
			settingValues(fv, path+".", out)
			continue
		}
		switch x := fv.Interface().(type) {
		case time.Duration:
			out[path] = "duration " + x.String()
		default:
			switch fv.Kind() {
			case reflect.String: // configopaque.String prints redacted
				out[path] = fv.String()
			case reflect.Slice:
				if fv.Len() == 0 {
					out[path] = "[]"
				} else {
					out[path] = fmt.Sprint(x)
				}
			case reflect.Pointer:
				if !fv.IsNil() {
					out[path] = fmt.Sprint(fv.Elem().Interface())
				}
			default:
				out[path] = fmt.Sprint(x)
			}
		}
	}
}
