package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ocbManifest = "examples/ocb/builder-config.yaml"

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

// TestOCBManifestInReadme: README.md shows the tested manifest verbatim.
func TestOCBManifestInReadme(t *testing.T) {
	if !strings.Contains(string(readFile(t, "README.md")), manifestBody(t)) {
		t.Errorf("README.md does not contain %s from `dist:` on, verbatim; copy it over", ocbManifest)
	}
}

// TestOCBManifestBuildsFromCleanDir builds a collector from the README's
// manifest the way a user would: in an empty directory, with ocb v0.165.0
// (built from this repository's go.mod tool line), the replaces lines
// pointing at this clone. The binary must list the dedup processor and
// accept a config that uses it.
func TestOCBManifestBuildsFromCleanDir(t *testing.T) {
	repo := root(t)
	tools := t.TempDir()
	ocb := filepath.Join(tools, "ocb")
	// Builds take seconds when the module and build caches are warm (`make
	// build` ran), minutes when cold.
	const buildTimeout = 10 * time.Minute
	if out, err := runTimeout(t, buildTimeout, repo, nil, "go", "build", "-o", ocb, "go.opentelemetry.io/collector/cmd/builder"); err != nil {
		t.Fatalf("go build ocb: %v\n%s", err, out)
	}

	clean := t.TempDir()
	manifest := strings.ReplaceAll(manifestBody(t), "/path/to/otelcol-dedup", repo)
	if !strings.Contains(manifest, "=> "+repo+"/processor/dedupprocessor\n") {
		t.Fatalf("the manifest has no `=> /path/to/otelcol-dedup/processor/dedupprocessor` replaces line:\n%s", manifest)
	}
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
	out, err := run(t, clean, nil, bin, "components")
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
