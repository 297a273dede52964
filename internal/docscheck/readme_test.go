package docscheck

import (
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// section returns the text of md from the heading line that starts with
// heading up to the next heading of the same or a higher level.
func section(t *testing.T, md, heading string) string {
	t.Helper()
	i := strings.Index(md, "\n"+heading)
	if i < 0 {
		t.Fatalf("no heading %q", heading)
	}
	level := strings.Count(strings.Fields(heading)[0], "#")
	rest := md[i+1:]
	lines := strings.Split(rest, "\n")
	for k, l := range lines[1:] {
		if n := len(l) - len(strings.TrimLeft(l, "#")); n > 0 && n <= level && strings.HasPrefix(l[n:], " ") {
			return strings.Join(lines[:k+1], "\n")
		}
	}
	return rest
}

// TestReadmeGoRelease: the Go release README.md asks for is the one every
// module's go.mod requires.
func TestReadmeGoRelease(t *testing.T) {
	m := regexp.MustCompile(`You need Go (\d+\.\d+(?:\.\d+)?)`).FindStringSubmatch(string(readFile(t, "README.md")))
	if m == nil {
		t.Fatal(`README.md does not say "You need Go X"`)
	}
	for _, mod := range []string{"go.mod", "processor/dedupprocessor/go.mod"} {
		g := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(string(readFile(t, mod)))
		if g == nil || g[1] != m[1] {
			t.Errorf("README.md asks for Go %s, %s's go line is %v", m[1], mod, g)
		}
	}
}

// TestReadmeNamesEveryMakeTarget: README.md names every target of the
// Makefile, as `make TARGET` or in a command line.
func TestReadmeNamesEveryMakeTarget(t *testing.T) {
	phony := regexp.MustCompile(`(?m)^\.PHONY:(.*)$`).FindStringSubmatch(string(readFile(t, "Makefile")))
	if phony == nil {
		t.Fatal("the Makefile has no .PHONY line")
	}
	readme := string(readFile(t, "README.md"))
	for _, target := range strings.Fields(phony[1]) {
		if !regexp.MustCompile("(`|\n)make " + regexp.QuoteMeta(target) + "(`| )").MatchString(readme) {
			t.Errorf("README.md does not name `make %s`", target)
		}
	}
}

// TestReadmeLayoutNamesEveryDocsPage: the Layout table's docs/ row names
// every page of docs/.
func TestReadmeLayoutNamesEveryDocsPage(t *testing.T) {
	layout := section(t, string(readFile(t, "README.md")), "### Layout")
	var row string
	for _, l := range strings.Split(layout, "\n") {
		if strings.HasPrefix(l, "| `docs/` |") {
			row = strings.ToLower(l)
		}
	}
	if row == "" {
		t.Fatal("README.md's Layout has no docs/ row")
	}
	pages, err := filepath.Glob(filepath.Join(root(t), "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		name := strings.ReplaceAll(strings.TrimSuffix(filepath.Base(p), ".md"), "-", " ")
		if !strings.Contains(row, name) {
			t.Errorf("README.md's Layout row for docs/ does not name %s", filepath.Base(p))
		}
	}
}

// TestComponentReadmeLinks: a link whose text is "component README" leads to
// it.
func TestComponentReadmeLinks(t *testing.T) {
	link := regexp.MustCompile(`\[component README\]\(([^)#\s]+)`)
	for _, file := range linkedFiles {
		for _, m := range link.FindAllStringSubmatch(string(readFile(t, file)), -1) {
			if got := path.Join(path.Dir(file), m[1]); got != "processor/dedupprocessor/README.md" {
				t.Errorf("%s: a link reads \"component README\" but leads to %s", file, got)
			}
		}
	}
}

// TestCacheSizingAgrees: README.md's advice on cache.max_entries over-sizes
// it as the component README asks.
func TestCacheSizingAgrees(t *testing.T) {
	m := regexp.MustCompile("size\\s+`max_entries`\\s+about\\s+(\\d+%)\\s+above").FindStringSubmatch(string(readFile(t, "processor/dedupprocessor/README.md")))
	if m == nil {
		t.Fatal("the component README no longer says by how much to over-size max_entries")
	}
	cache := section(t, string(readFile(t, "README.md")), "### 4. Size the window and the cache")
	if !strings.Contains(cache, "plus "+m[1]) {
		t.Errorf("README.md's cache sizing does not add the %s the component README asks for", m[1])
	}
}

// TestMemoryFiguresHaveOneHome: the READMEs state no memory figure (bytes,
// MB, GB): they link to BENCHMARKS.md, which measures and works them out, so
// a new measurement changes one file.
func TestMemoryFiguresHaveOneHome(t *testing.T) {
	figure := regexp.MustCompile(`\d[\d,]*(?:\.\d+)? ?(?:bytes|B|MB|GB)\b`)
	for _, file := range []string{"README.md", "processor/dedupprocessor/README.md"} {
		for _, f := range figure.FindAllString(string(readFile(t, file)), -1) {
			t.Errorf("%s states %q: link to BENCHMARKS.md#memory-per-key instead", file, f)
		}
	}
}
