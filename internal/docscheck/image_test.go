package docscheck

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// No Docker engine runs where the tests run, so the container image is
// checked without one: the Dockerfile against the Makefile's build, the
// manifest and go.mod; its build stage run outside Docker on a copy of the
// build context that .dockerignore lets through; the image's config and the
// compose fleet's configs validated by the real binary.

// dockerInstr is one instruction of a Dockerfile: its keyword (upper case)
// and the rest of its line.
type dockerInstr struct{ cmd, args string }

// dockerStage is one FROM ... [AS name] and its instructions.
type dockerStage struct {
	from, name string
	instrs     []dockerInstr
}

// all returns the arguments of the stage's instructions of kind cmd.
func (s dockerStage) all(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// parseDockerfile reads the instructions of a Dockerfile (comments and
// continuation lines handled, ARGs before the first FROM substituted into
// FROM lines).
func parseDockerfile(t *testing.T, text string) []dockerStage {
	t.Helper()
	var lines []string
	var cur strings.Builder
	for _, line := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur.WriteString(strings.TrimSuffix(trimmed, "\\") + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	args := map[string]string{}
	var stages []dockerStage
	for _, line := range lines {
		cmd, rest, _ := strings.Cut(line, " ")
		cmd, rest = strings.ToUpper(cmd), strings.TrimSpace(rest)
		switch {
		case cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case cmd == "FROM":
			from := os.Expand(rest, func(k string) string { return args[k] })
			f := strings.Fields(from)
			st := dockerStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				st.name = f[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			t.Fatalf("Dockerfile: %s before the first FROM", cmd)
		default:
			stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, dockerInstr{cmd, rest})
		}
	}
	if len(stages) == 0 {
		t.Fatal("Dockerfile: no FROM")
	}
	return stages
}

// globalArg returns the default of an ARG declared before the first FROM.
func globalArg(text, name string) string {
	m := regexp.MustCompile(`(?m)^ARG ` + name + `=(\S+)$`).FindStringSubmatch(text)
	if m == nil {
		return ""
	}
	return m[1]
}

// jsonArgs parses an exec-form instruction (["a", "b"]).
func jsonArgs(t *testing.T, what, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("Dockerfile %s %s: want the exec form [\"...\"]: %v", what, s, err)
	}
	return out
}

// copyInstr is a COPY: its --from stage ("" for the build context), sources
// and destination.
type copyInstr struct {
	from string
	srcs []string
	dst  string
}

func parseCopy(t *testing.T, args string) copyInstr {
	t.Helper()
	f := strings.Fields(args)
	var c copyInstr
	for len(f) > 0 && strings.HasPrefix(f[0], "--") {
		if v, ok := strings.CutPrefix(f[0], "--from="); ok {
			c.from = v
		} else {
			t.Fatalf("Dockerfile COPY %s: flag %s not understood by this test", args, f[0])
		}
		f = f[1:]
	}
	if len(f) < 2 {
		t.Fatalf("Dockerfile COPY %s: want sources and a destination", args)
	}
	c.srcs, c.dst = f[:len(f)-1], f[len(f)-1]
	return c
}

// makeVar returns the value of a `NAME := value` line of the Makefile.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + ` :?= (\S+)$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile: no %s", name)
	}
	return m[1]
}

// ignoreRule is one line of .dockerignore.
type ignoreRule struct {
	re     *regexp.Regexp
	negate bool
	prefix string // the pattern's literal part, for negations
}

// dockerIgnore is .dockerignore's rules, in order: the last rule that
// matches a path or one of its parent directories decides, as in Docker.
type dockerIgnore []ignoreRule

func parseDockerIgnore(text string) dockerIgnore {
	var rules dockerIgnore
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{}
		if p, ok := strings.CutPrefix(line, "!"); ok {
			r.negate, line = true, p
		}
		line = path.Clean(strings.TrimPrefix(line, "/"))
		var re strings.Builder
		for i := 0; i < len(line); i++ {
			switch {
			case strings.HasPrefix(line[i:], "**/"):
				re.WriteString("(.*/)?")
				i += 2
			case strings.HasPrefix(line[i:], "**"):
				re.WriteString(".*")
				i++
			case line[i] == '*':
				re.WriteString("[^/]*")
			case line[i] == '?':
				re.WriteString("[^/]")
			default:
				re.WriteString(regexp.QuoteMeta(line[i : i+1]))
			}
		}
		r.re = regexp.MustCompile("^" + re.String() + "$")
		r.prefix, _, _ = strings.Cut(line, "*")
		rules = append(rules, r)
	}
	return rules
}

// excluded says whether a path (slash-separated, relative to the context)
// stays out of the build context.
func (d dockerIgnore) excluded(p string) bool {
	out := false
	for _, r := range d {
		for q := p; q != "."; q = path.Dir(q) {
			if r.re.MatchString(q) {
				out = !r.negate
				break
			}
		}
	}
	return out
}

// mayInclude says whether a negation could bring back something under dir.
func (d dockerIgnore) mayInclude(dir string) bool {
	for _, r := range d {
		if r.negate && strings.HasPrefix(r.prefix, dir+"/") {
			return true
		}
	}
	return false
}

// buildContext copies what .dockerignore lets through of the repository to
// a new directory.
func buildContext(t *testing.T) string {
	t.Helper()
	repo := root(t)
	ignore := parseDockerIgnore(string(readFile(t, ".dockerignore")))
	ctx := t.TempDir()
	err := filepath.WalkDir(repo, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		if rel == "." {
			return nil
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if ignore.excluded(rel) && !ignore.mayInclude(rel) {
				return filepath.SkipDir
			}
			return nil
		}
		if ignore.excluded(rel) {
			return nil
		}
		return copyFile(p, filepath.Join(ctx, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
	return ctx
}

func copyFile(src, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// copyInto does a COPY: src (a file, or a directory whose contents are
// copied) to dst inside rootfs, dst a directory when it ends in "/".
func copyInto(t *testing.T, src, rootfs, dst string) {
	t.Helper()
	fi, err := os.Stat(src)
	if err != nil {
		t.Fatalf("COPY source: %v", err)
	}
	target := filepath.Join(rootfs, dst)
	if !fi.IsDir() {
		if strings.HasSuffix(dst, "/") {
			target = filepath.Join(target, filepath.Base(src))
		}
		if err := copyFile(src, target); err != nil {
			t.Fatal(err)
		}
		return
	}
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		return copyFile(p, filepath.Join(target, rel))
	})
	if err != nil {
		t.Fatal(err)
	}
}

// stageByName returns the stage named name.
func stageByName(t *testing.T, stages []dockerStage, name string) dockerStage {
	t.Helper()
	for _, s := range stages {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("Dockerfile: no stage %q", name)
	return dockerStage{}
}

// imageFiles is what the checks read: the Dockerfile's stages, the build
// stage (the one the final stage copies the binary from), the final stage.
type imageFiles struct {
	text         string
	stages       []dockerStage
	build, final dockerStage
	binCopy      copyInstr // the binary, from the build stage
}

func readImage(t *testing.T) imageFiles {
	t.Helper()
	img := imageFiles{text: string(readFile(t, "Dockerfile"))}
	img.stages = parseDockerfile(t, img.text)
	img.final = img.stages[len(img.stages)-1]
	for _, c := range img.final.all("COPY") {
		if cp := parseCopy(t, c); cp.from != "" {
			img.binCopy = cp
		}
	}
	if img.binCopy.from == "" {
		t.Fatal("Dockerfile: the final stage copies nothing from a build stage")
	}
	img.build = stageByName(t, img.stages, img.binCopy.from)
	return img
}

// workdir is the stage's last WORKDIR ("/" without one).
func (s dockerStage) workdir() string {
	w := s.all("WORKDIR")
	if len(w) == 0 {
		return "/"
	}
	return w[len(w)-1]
}

// TestImageMatchesTheBuild: the Dockerfile builds what `make build` builds:
// the same manifest through the same ocb command (so the ocb of go.mod's
// tool line, at the manifest's collector version), with the Go release of
// go.mod, static (CGO_ENABLED=0), taking the binary from the path the
// manifest and the Makefile name. The image runs it as a non-root user,
// with a config that listens on 0.0.0.0 on exactly the ports it exposes.
func TestImageMatchesTheBuild(t *testing.T) {
	img := readImage(t)
	gomod := string(readFile(t, "go.mod"))
	makefile := string(readFile(t, "Makefile"))
	var manifest struct {
		Dist struct {
			Name       string `yaml:"name"`
			OutputPath string `yaml:"output_path"`
			CGoEnabled bool   `yaml:"cgo_enabled"`
		} `yaml:"dist"`
		Receivers []struct {
			GoMod string `yaml:"gomod"`
		} `yaml:"receivers"`
	}
	if err := yaml.Unmarshal(readFile(t, "builder-config.yaml"), &manifest); err != nil {
		t.Fatal(err)
	}

	// Go: the release of go.mod's go line.
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindStringSubmatch(gomod)
	if goLine == nil {
		t.Fatal("go.mod: no go line")
	}
	if got := globalArg(img.text, "GO_VERSION"); got != goLine[1] {
		t.Errorf("Dockerfile ARG GO_VERSION=%s, go.mod says go %s", got, goLine[1])
	}
	if want := "golang:" + goLine[1] + "-"; !strings.HasPrefix(img.build.from, want) {
		t.Errorf("build stage FROM %s, want %s...", img.build.from, want)
	}

	// ocb: the Makefile's command on the same manifest; its version is
	// go.mod's tool line, the manifest's collector release.
	mk := regexp.MustCompile(`\$\(GO\) (tool builder --config builder-config\.yaml[^;]*);`).FindStringSubmatch(makefile)
	if mk == nil {
		t.Fatal("Makefile: no `$(GO) tool builder --config ...` recipe")
	}
	if want := "go " + mk[1]; !slices.Contains(img.build.all("RUN"), want) {
		t.Errorf("build stage RUNs %q, want the Makefile's %q", img.build.all("RUN"), want)
	}
	if !regexp.MustCompile(`(?m)^tool \(\n(\t.*\n)*\tgo\.opentelemetry\.io/collector/cmd/builder\n`).MatchString(gomod) {
		t.Error("go.mod has no tool line for go.opentelemetry.io/collector/cmd/builder")
	}
	ocb := regexp.MustCompile(`go\.opentelemetry\.io/collector/cmd/builder (v\S+)`).FindStringSubmatch(gomod)
	if ocb == nil || len(manifest.Receivers) == 0 || !strings.HasSuffix(manifest.Receivers[0].GoMod, " "+ocb[1]) {
		t.Errorf("ocb in go.mod %v, the manifest's receiver %v: want the same release", ocb, manifest.Receivers)
	}

	// Static: CGO_ENABLED=0 in the build stage, and the manifest does not
	// turn cgo on (ocb's default is off, so make build's binary is static too).
	if !slices.Contains(img.build.all("ENV"), "CGO_ENABLED=0") {
		t.Errorf("build stage ENV %q, want CGO_ENABLED=0", img.build.all("ENV"))
	}
	if manifest.Dist.CGoEnabled {
		t.Error("builder-config.yaml sets dist.cgo_enabled: the binary would not be static")
	}

	// The binary: where the manifest puts it, the Makefile's DIST.
	dist := path.Join(manifest.Dist.OutputPath, manifest.Dist.Name)
	if got := makeVar(t, makefile, "DIST"); path.Clean(got) != dist {
		t.Errorf("Makefile DIST = %s, the manifest builds %s", got, dist)
	}
	if want := path.Join(img.build.workdir(), dist); len(img.binCopy.srcs) != 1 || img.binCopy.srcs[0] != want {
		t.Errorf("the final stage copies %v from the build stage, want %s", img.binCopy.srcs, want)
	}
	entry := jsonArgs(t, "ENTRYPOINT", lastOf(t, img.final, "ENTRYPOINT"))
	if len(entry) != 1 || entry[0] != img.binCopy.dst {
		t.Errorf("ENTRYPOINT %q, want [%q] (the copied binary)", entry, img.binCopy.dst)
	}

	// Non-root, on a base without a shell or package manager.
	if img.final.from != "scratch" && !regexp.MustCompile(`^gcr\.io/distroless/static[-a-z0-9]*:nonroot$`).MatchString(img.final.from) {
		t.Errorf("final stage FROM %s, want scratch or distroless static :nonroot", img.final.from)
	}
	uid, _, _ := strings.Cut(lastOf(t, img.final, "USER"), ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q, want a numeric non-root user", lastOf(t, img.final, "USER"))
	}
	if runs := img.final.all("RUN"); len(runs) > 0 {
		t.Errorf("the final stage RUNs %q: its base has no shell", runs)
	}

	// The default config: copied from the context, named by CMD, validating
	// with nothing set, listening on 0.0.0.0 on exactly the exposed ports.
	cmd := jsonArgs(t, "CMD", lastOf(t, img.final, "CMD"))
	if len(cmd) != 2 || cmd[0] != "--config" {
		t.Fatalf("CMD %q, want [\"--config\", <file>]", cmd)
	}
	src := ""
	for _, c := range img.final.all("COPY") {
		if cp := parseCopy(t, c); cp.from == "" && cp.dst == cmd[1] && len(cp.srcs) == 1 {
			src = cp.srcs[0]
		}
	}
	if src == "" {
		t.Fatalf("no COPY from the context to %s, the CMD's config", cmd[1])
	}
	if out, err := validate(t, filepath.Join(root(t), src)); err != nil {
		t.Errorf("otelcol-dedup validate --config %s: %v\n%s", src, err, out)
	}
	listen := listenAddrs(t, src)
	var ports []int
	for addr := range listen {
		host, port, _ := strings.Cut(addr, ":")
		if host != "0.0.0.0" {
			t.Errorf("%s listens on %s: unreachable from outside the container", src, addr)
		}
		n, _ := strconv.Atoi(port)
		ports = append(ports, n)
	}
	var exposed []int
	for _, e := range img.final.all("EXPOSE") {
		for _, f := range strings.Fields(e) {
			n, err := strconv.Atoi(f)
			if err != nil {
				t.Errorf("EXPOSE %s: want port numbers", e)
			}
			exposed = append(exposed, n)
		}
	}
	slices.Sort(ports)
	slices.Sort(exposed)
	if !slices.Equal(ports, exposed) {
		t.Errorf("EXPOSE %v, %s listens on %v", exposed, src, ports)
	}
	// The same collector as make run's, listening on every interface.
	local := strings.ReplaceAll(configBody(string(readFile(t, "testdata/default.yaml"))), "127.0.0.1", "0.0.0.0")
	if configBody(string(readFile(t, src))) != local {
		t.Errorf("%s differs from testdata/default.yaml by more than 127.0.0.1 -> 0.0.0.0 (and its header)", src)
	}
}

// TestDockerignoreKeepsTheBuildInputs: the build context has every file the
// build stage reads, and none of the repository's build output, results or
// history.
func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	ignore := parseDockerIgnore(string(readFile(t, ".dockerignore")))
	for _, p := range []string{"go.mod", "go.sum", "builder-config.yaml", "deploy/image/config.yaml",
		"processor/dedupprocessor/go.mod", "processor/dedupprocessor/go.sum", "processor/dedupprocessor/processor.go",
		"processor/dedupprocessor/internal/localcache/cache.go"} {
		if ignore.excluded(p) {
			t.Errorf(".dockerignore leaves out %s, which the build reads", p)
		}
	}
	for _, p := range []string{".git/config", "_build/go.mod", "bin/otelcol-dedup", "_bench/report.txt",
		"processor/dedupprocessor/processor_test.go", "processor/dedupprocessor/testdata/config.yaml", "cmd/dedupbench/main.go"} {
		if !ignore.excluded(p) {
			t.Errorf(".dockerignore lets %s into the build context", p)
		}
	}
}

// TestImageBuildStageBuildsTheDistribution runs the Dockerfile's build
// stage without Docker: its COPYs from a copy of the build context that
// .dockerignore lets through, its ENVs, its RUNs in its WORKDIR, each
// rooted in a temporary directory. The binary the final stage copies must
// be there, statically linked, list the dedup processor, and validate the
// image's config.
func TestImageBuildStageBuildsTheDistribution(t *testing.T) {
	img := readImage(t)
	ctx := buildContext(t)
	rootfs := t.TempDir()
	env := append(os.Environ(), "TMPDIR="+t.TempDir()) // ocb makes a temp dir of its own
	workdir := "/"
	for _, in := range img.build.instrs {
		switch in.cmd {
		case "WORKDIR":
			workdir = in.args
			if err := os.MkdirAll(filepath.Join(rootfs, workdir), 0o755); err != nil {
				t.Fatal(err)
			}
		case "COPY":
			cp := parseCopy(t, in.args)
			if cp.from != "" {
				t.Fatalf("build stage COPY --from=%s: not emulated", cp.from)
			}
			dst := cp.dst
			if !path.IsAbs(dst) {
				dst = path.Join(workdir, dst)
				if strings.HasSuffix(cp.dst, "/") {
					dst += "/"
				}
			}
			for _, s := range cp.srcs {
				copyInto(t, filepath.Join(ctx, s), rootfs, dst)
			}
		case "ENV":
			k, v, ok := strings.Cut(in.args, "=")
			if !ok {
				t.Fatalf("ENV %s: want KEY=value", in.args)
			}
			env = append(env, k+"="+v)
		case "RUN":
			// Builds take seconds with warm module and build caches (make
			// build ran), minutes when cold.
			if out, err := runIn(t, 10*time.Minute, filepath.Join(rootfs, workdir), env, "bash", "-c", in.args); err != nil {
				t.Fatalf("RUN %s: %v\n%s", in.args, err, out)
			}
		default:
			t.Fatalf("build stage %s: not emulated", in.cmd)
		}
	}
	bin := filepath.Join(rootfs, img.binCopy.srcs[0])
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("the binary the final stage copies: %v", err)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s is dynamically linked (it has an interpreter): it would not run on a static base", img.binCopy.srcs[0])
		}
	}
	f.Close()
	out, err := run(t, rootfs, nil, bin, "components")
	if err != nil || !strings.Contains(out, "- name: dedup\n      module: github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor") {
		t.Errorf("%s components: %v, want dedup listed:\n%s", img.binCopy.srcs[0], err, out)
	}
	if out, err := runIn(t, cmdTimeout, rootfs, nil, bin, "validate", "--config", filepath.Join(root(t), "deploy/image/config.yaml")); err != nil {
		t.Errorf("the built binary's validate of the image config: %v\n%s", err, out)
	}
}

// lastOf returns the arguments of the stage's last instruction of kind cmd.
func lastOf(t *testing.T, s dockerStage, cmd string) string {
	t.Helper()
	all := s.all(cmd)
	if len(all) == 0 {
		t.Fatalf("Dockerfile: the final stage has no %s", cmd)
	}
	return all[len(all)-1]
}

// configBody is a config file without its opening comment.
func configBody(text string) string {
	return strings.TrimPrefix(text, headerComment(text))
}

// listenAddrs returns the host:port addresses a collector config listens
// on (receiver protocols, extensions, the Prometheus metrics reader), by
// where they are set.
func listenAddrs(t *testing.T, rel string) map[string]string {
	t.Helper()
	var cfg struct {
		Receivers  map[string]map[string]any `yaml:"receivers"`
		Extensions map[string]map[string]any `yaml:"extensions"`
		Service    struct {
			Telemetry struct {
				Metrics struct {
					Readers []struct {
						Pull struct {
							Exporter struct {
								Prometheus *struct {
									Host string `yaml:"host"`
									Port int    `yaml:"port"`
								} `yaml:"prometheus"`
							} `yaml:"exporter"`
						} `yaml:"pull"`
					} `yaml:"readers"`
				} `yaml:"metrics"`
			} `yaml:"telemetry"`
		} `yaml:"service"`
	}
	if err := yaml.Unmarshal(readFile(t, rel), &cfg); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	addrs := map[string]string{}
	for id, r := range cfg.Receivers {
		protocols, _ := r["protocols"].(map[string]any)
		for proto, p := range protocols {
			if m, ok := p.(map[string]any); ok {
				if ep, ok := m["endpoint"].(string); ok {
					addrs[ep] = "receivers::" + id + "::" + proto
				}
			}
		}
	}
	for id, e := range cfg.Extensions {
		if ep, ok := e["endpoint"].(string); ok {
			addrs[ep] = "extensions::" + id
		}
	}
	for _, r := range cfg.Service.Telemetry.Metrics.Readers {
		if p := r.Pull.Exporter.Prometheus; p != nil {
			addrs[fmt.Sprintf("%s:%d", p.Host, p.Port)] = "service::telemetry"
		}
	}
	return addrs
}
