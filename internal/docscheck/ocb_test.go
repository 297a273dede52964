package docscheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

const ocbManifest = "examples/ocb/builder-config.yaml"

// processorReplace is the one replaces line a manifest that builds the
// processor from a clone needs, with the clone's path as README.md writes it.
const processorReplace = "  - github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor => /path/to/otelcol-dedup/processor/dedupprocessor\n"

// manifestBody is the manifest from its `dist:` line on (the comment above
// it is for the file only).
func manifestBody(t *testing.T) string {
	t.Helper()
	text := string(readFile(t, ocbManifest))
	i := strings.Index(text, "dist:\n")
	if i < 0 {
		t.Fatalf("%s has no dist: section", ocbManifest)
	}
	return text[i:]
}

// readmeManifest is the manifest of README.md's "Put `dedup` in your own
// collector": its YAML block that starts with `dist:`.
func readmeManifest(t *testing.T) string {
	t.Helper()
	m := regexp.MustCompile("(?s)```yaml\n(dist:\n.*?)```").FindAllStringSubmatch(string(readFile(t, "README.md")), -1)
	if len(m) != 1 {
		t.Fatalf("README.md has %d YAML blocks that start with `dist:`, want 1 (the manifest of your own build)", len(m))
	}
	return m[0][1]
}

// TestOCBManifestInReadme: README.md shows the tested manifest verbatim.
func TestOCBManifestInReadme(t *testing.T) {
	if readmeManifest(t) != manifestBody(t) {
		t.Errorf("README.md's manifest (its YAML block from `dist:` on) is not %s from `dist:` on; copy it over", ocbManifest)
	}
}

// TestOCBManifestBuildsFromCleanDir builds a collector from README.md's
// manifest, as README.md shows it, the way a user would: in an empty
// directory, with the ocb of this repository's go.mod tool line (`go tool
// builder`, as the Makefile runs it), its one replaces line pointing at this
// working tree. The processor module requires only published modules, so
// that one line is all ocb needs. The binary must list the dedup processor
// and accept a config that uses it.
//
// It shares the Go module and build caches: on caches that `make build`
// warmed it compiles what the manifest has that otelcol-dedup lacks and
// links (about 1-2 minutes on 2 cores), on empty ones several minutes.
func TestOCBManifestBuildsFromCleanDir(t *testing.T) {
	repo := root(t)
	const buildTimeout = 10 * time.Minute
	// The path of the ocb binary `go tool builder` runs (built into the
	// build cache once); run in the empty directory, not in the repository's
	// module, so that it writes its output_path there.
	out, err := runTimeout(t, buildTimeout, repo, nil, "go", "tool", "-n", "builder")
	if err != nil {
		t.Fatalf("go tool -n builder: %v\n%s", err, out)
	}
	ocb := strings.TrimSpace(out)

	manifest := readmeManifest(t)
	_, replaces, _ := strings.Cut(manifest, "\nreplaces:\n")
	if replaces != processorReplace {
		t.Fatalf("README.md's manifest must end with a replaces: section of exactly one line, %q:\n%s", processorReplace, manifest)
	}
	manifest = strings.ReplaceAll(manifest, "/path/to/otelcol-dedup", repo)
	clean := t.TempDir()
	if err := os.WriteFile(filepath.Join(clean, "builder-config.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	// ocb makes a temp dir of its own on every run: keep it in the test's.
	// The compile flags are make build's, so that the packages the two
	// builds share are compiled once.
	tmp := t.TempDir()
	if out, err := runTimeout(t, buildTimeout, clean, []string{"TMPDIR=" + tmp}, ocb, "--config", "builder-config.yaml", "--gcflags=all=-dwarf=false"); err != nil {
		t.Fatalf("ocb --config builder-config.yaml in an empty directory: %v\n%s", err, out)
	}
	bin := filepath.Join(clean, "_build", "otelcol-custom")
	out, err = run(t, clean, nil, bin, "components")
	if err != nil {
		t.Fatalf("otelcol-custom components: %v\n%s", err, out)
	}
	for _, want := range []string{
		"- name: dedup\n      module: github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor v0.0.0",
		"- name: otlp\n", "- name: otlp_grpc\n", "- name: debug\n", "- name: batch\n", "- name: memory_limiter\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("otelcol-custom components does not list %q:\n%s", want, out)
		}
	}
	// README's config for this collector (the block marked `ocb`), as
	// shipped: with an empty environment.
	var blocks []docBlock
	for _, b := range docBlocks(t) {
		if b.mark == "ocb" {
			blocks = append(blocks, b)
		}
	}
	if len(blocks) != 1 {
		t.Fatalf("README.md has %d YAML blocks marked `ocb`, want 1", len(blocks))
	}
	cfg := filepath.Join(clean, "config.yaml")
	if err := os.WriteFile(cfg, []byte(blocks[0].text), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runIn(t, cmdTimeout, clean, nil, bin, "validate", "--config", cfg); err != nil {
		t.Fatalf("otelcol-custom validate README.md's config: %v\n%s", err, out)
	}
	for _, p := range promiseBreaches(t, []byte(blocks[0].text)) {
		t.Errorf("README.md's config for the custom collector: %s", p)
	}
}
