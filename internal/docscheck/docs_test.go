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

// The Markdown files whose YAML blocks this package checks (see doc_test.go for
// the rule each block follows): the user docs.
var docFiles = []string{
	"README.md",
	"CHANGELOG.md",
	"processor/dedupprocessor/README.md",
	"docs/monitoring.md",
	"docs/troubleshooting.md",
	"docs/versioning.md",
	"docs/receivers.md",
	"docs/redis.md",
	"docs/replica-election.md",
	"docs/tenants.md",
	"docs/security.md",
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
// it, if any: <!-- docscheck: KIND -->.
var fenceRE = regexp.MustCompile("(?s)(?:<!-- docscheck: ([a-z-]+) -->\n)?```yaml\n(.*?)```")

// fragmentRE matches the visible sentence that makes a block a fragment:
// "A fragment, completed by [`FILE`](PATH)", optionally followed by "in a
// collector that has the `TYPE` exporter" (or receiver, processor,
// extension) when the block needs a component the distribution lacks, or by
// ", run with `--feature-gates=GATES`" when it needs a feature gate.
var fragmentRE = regexp.MustCompile("A\\s+fragment,\\s+completed\\s+by\\s+\\[`[^`]+`\\]\\(([^)\\s]+)\\)(?:\\s+in\\s+a\\s+collector\\s+that\\s+has\\s+the\\s+`([a-z_]+)`\\s+(?:exporter|receiver|processor|extension))?(?:,\\s+run\\s+with\\s+`(--feature-gates=[^`\\s]+)`)?")

// docBlock is one YAML block of the docs.
type docBlock struct {
	file string
	n    int    // 1-based, in its file
	mark string // the docscheck mark's kind; "" for none
	text string
	// A fragment: the config file (relative to the repository root) its
	// text says completes it, and the component type it says it needs.
	completedBy string
	needs       string
	gates       string // "--feature-gates=..." the text says it runs with, or ""
}

func (b docBlock) String() string { return fmt.Sprintf("%s#%d", b.file, b.n) }

func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	var out []docBlock
	for _, file := range docFiles {
		text := string(readFile(t, file))
		for i, m := range fenceRE.FindAllStringSubmatchIndex(text, -1) {
			b := docBlock{file: file, n: i + 1, text: text[m[4]:m[5]]}
			if m[2] >= 0 {
				b.mark = text[m[2]:m[3]]
			}
			// The paragraph right before the block (or its mark).
			before := strings.TrimRight(text[:m[0]], "\n")
			if k := strings.LastIndex(before, "\n\n"); k >= 0 {
				before = before[k+2:]
			}
			if f := fragmentRE.FindStringSubmatch(before); f != nil {
				b.completedBy = filepath.ToSlash(filepath.Join(filepath.Dir(file), f[1]))
				b.needs, b.gates = f[2], f[3]
			}
			out = append(out, b)
		}
	}
	return out
}

// TestDocSnippetsValidate checks every YAML block of the docs as printed,
// by the rule of doc_test.go, never completing one silently: a collector config
// passes `otelcol-dedup validate` as it stands; a fragment (its text says so,
// naming the shipped config that completes it) passes validate merged over
// that config, as `validate --config FILE --config fragment.yaml` merges
// them, or, when its text says it needs a component the distribution lacks,
// is refused for exactly that component; a block marked `ocb` is left to
// TestOCBManifestBuildsFromCleanDir, which validates it with the binary the
// README's manifest builds; a Prometheus config passes `promtool check
// config`; an ocb manifest must be the tested one. Collector configs keep
// "acknowledged means delivered". Any other block fails the test.
func TestDocSnippetsValidate(t *testing.T) {
	counts := map[string]int{}
	for _, b := range docBlocks(t) {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(b.text), &doc); err != nil {
			t.Errorf("%s: %v\n%s", b, err, b.text)
			continue
		}
		kind := ""
		switch {
		case b.mark == "ocb":
			kind = "ocb"
		case b.mark != "":
			t.Errorf("%s: unknown docscheck mark %q (see doc_test.go)", b, b.mark)
			continue
		case doc["dist"] != nil:
			kind = "manifest"
		case doc["scrape_configs"] != nil:
			kind = "prometheus"
		case b.completedBy != "" && b.needs != "":
			kind = "fragment-needs"
		case b.completedBy != "":
			kind = "fragment"
		default:
			kind = "complete"
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
		}
		t.Run(b.String(), func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "block.yaml")
			if err := os.WriteFile(p, []byte(b.text), 0o644); err != nil {
				t.Fatal(err)
			}
			configs := []string{p}
			if b.completedBy != "" {
				if !strings.HasPrefix(b.completedBy, "examples/") && !strings.HasPrefix(b.completedBy, "testdata/") {
					t.Fatalf("a fragment must be completed by a shipped config (examples/, testdata/), not %s", b.completedBy)
				}
				configs = []string{filepath.Join(root(t), b.completedBy), p}
			}
			var flags []string
			if b.gates != "" {
				flags = append(flags, b.gates)
			}
			args := []string{"validate"}
			for _, c := range configs {
				args = append(args, "--config", c)
			}
			out, err := runIn(t, cmdTimeout, root(t), nil, binary(t), append(args, flags...)...)
			if kind == "fragment-needs" {
				if err == nil || !strings.Contains(out, "unknown type: \""+b.needs+"\"") {
					t.Errorf("its text says it needs %q, which the distribution lacks, but validate said (%v):\n%s", b.needs, err, out)
				}
				return
			}
			if err != nil {
				what := "as printed"
				if b.completedBy != "" {
					what = "merged over " + b.completedBy
				}
				t.Fatalf("validate %s: %v\n%s\nblock:\n%s", what, err, out, b.text)
			}
			args[0] = "print-config"
			merged, err := runIn(t, cmdTimeout, root(t), nil, binary(t), append(args, flags...)...)
			if err != nil {
				t.Fatalf("print-config: %v\n%s", err, merged)
			}
			for _, p := range promiseBreaches(t, []byte(merged)) {
				t.Errorf("%s", p)
			}
		})
	}
	// A new block updates these counts.
	want := map[string]int{"complete": 1, "fragment": 10, "fragment-needs": 1, "ocb": 1, "manifest": 1, "prometheus": 1}
	if !maps.Equal(counts, want) {
		t.Errorf("YAML blocks by kind: %v, want %v", counts, want)
	}
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

// TestUserDocsAreAReference: the component README is a reference a user
// scans (at most 400 lines), no table cell of the docs runs past a few
// hundred characters, and the user docs (the component README, docs/,
// examples/README.md, and README.md up to its Contributing section) speak
// of the software, not of its tests or source files.
func TestUserDocsAreAReference(t *testing.T) {
	const maxLines, maxCell = 400, 400
	readme := string(readFile(t, "processor/dedupprocessor/README.md"))
	if n := strings.Count(readme, "\n"); n > maxLines {
		t.Errorf("processor/dedupprocessor/README.md has %d lines, want at most %d: move walk-throughs to docs/", n, maxLines)
	}
	for _, file := range docFiles {
		for i, line := range strings.Split(string(readFile(t, file)), "\n") {
			if !strings.HasPrefix(line, "|") {
				continue
			}
			for _, cell := range strings.Split(line, " | ") {
				if len(cell) > maxCell {
					t.Errorf("%s:%d: a table cell of %d characters (at most %d): %.80s...", file, i+1, len(cell), maxCell, cell)
				}
			}
		}
	}
	internals := regexp.MustCompile(`\b(Test|Benchmark|Fuzz)[A-Z]\w+|\b\w+\.go\b`)
	user := map[string]string{"README.md (before Contributing)": strings.Split(string(readFile(t, "README.md")), "\n## Contributing")[0]}
	for _, file := range docFiles {
		if file == "processor/dedupprocessor/README.md" || file == "examples/README.md" || strings.HasPrefix(file, "docs/") {
			user[file] = string(readFile(t, file))
		}
	}
	for file, text := range user {
		for _, m := range internals.FindAllString(text, -1) {
			t.Errorf("%s names %q: user docs speak of the software, not of its tests or sources", file, m)
		}
	}
}
