package docscheck

import (
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

const composeFile = "deploy/compose/compose.yaml"

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Volumes     []string          `yaml:"volumes"`
	Environment map[string]string `yaml:"environment"`
	DependsOn   []string          `yaml:"depends_on"`
	Ports       []string          `yaml:"ports"`
}

// TestComposeFleet: deploy/compose's collectors are this repository's
// image, each runs a config file it mounts, and that file validates with
// the real binary under exactly the environment compose gives it; every
// host:port in that environment names a service of the file listening
// there (Redis on 6379, a collector on a port its config listens on), every
// published port is one the collector listens on, and no host port is
// published twice.
func TestComposeFleet(t *testing.T) {
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(readFile(t, composeFile), &compose); err != nil {
		t.Fatal(err)
	}
	dir := path.Dir(composeFile)
	listening := map[string][]string{} // service -> addresses its config listens on
	collectors := 0
	for name, svc := range compose.Services {
		if svc.Build == nil {
			continue
		}
		collectors++
		if ctx := path.Clean(path.Join(dir, svc.Build.Context)); ctx != "." || svc.Build.Dockerfile != "Dockerfile" {
			t.Errorf("%s builds %s/%s, want the repository's Dockerfile", name, ctx, svc.Build.Dockerfile)
		}
		if len(svc.Command) != 2 || svc.Command[0] != "--config" {
			t.Errorf("%s: command %q, want [--config, <mounted file>]", name, svc.Command)
			continue
		}
		cfg := ""
		for _, v := range svc.Volumes {
			f := strings.Split(v, ":")
			if len(f) >= 2 && f[1] == svc.Command[1] {
				cfg = path.Clean(path.Join(dir, f[0]))
			}
		}
		if cfg == "" {
			t.Errorf("%s: no volume mounts %s", name, svc.Command[1])
			continue
		}
		var environ []string
		for k, v := range svc.Environment {
			environ = append(environ, k+"="+v)
		}
		if out, err := validateIn(t, environ, filepath.Join(root(t), cfg)); err != nil {
			t.Errorf("%s: otelcol-dedup validate --config %s with %q: %v\n%s", name, cfg, environ, err, out)
		}
		for addr := range listenAddrs(t, cfg) {
			listening[name] = append(listening[name], addr)
		}
	}
	if collectors < 3 {
		t.Errorf("%d collectors built from the Dockerfile, want two gateways and the backend", collectors)
	}

	hostPorts := map[string]string{}
	hostPort := regexp.MustCompile(`^([a-z0-9-]+):([0-9]+)$`)
	for name, svc := range compose.Services {
		for k, v := range svc.Environment {
			m := hostPort.FindStringSubmatch(v)
			if m == nil {
				continue
			}
			target, ok := compose.Services[m[1]]
			switch {
			case !ok:
				t.Errorf("%s: %s=%s names no service", name, k, v)
			case strings.HasPrefix(target.Image, "redis:"):
				if m[2] != "6379" {
					t.Errorf("%s: %s=%s, Redis listens on 6379", name, k, v)
				}
			case !slices.ContainsFunc(listening[m[1]], func(a string) bool { return strings.HasSuffix(a, ":"+m[2]) }):
				t.Errorf("%s: %s=%s, but %s listens on %v", name, k, v, m[1], listening[m[1]])
			}
			if ok && !slices.Contains(svc.DependsOn, m[1]) {
				t.Errorf("%s uses %s (%s) but does not depend on it", name, m[1], k)
			}
		}
		for _, p := range svc.Ports {
			host, container, ok := strings.Cut(p, ":")
			if _, err := strconv.Atoi(container); !ok || err != nil {
				t.Errorf("%s: port %q, want \"host:container\"", name, p)
				continue
			}
			if !slices.Contains(listening[name], "0.0.0.0:"+container) {
				t.Errorf("%s publishes %s, its config listens on %v", name, p, listening[name])
			}
			if other, dup := hostPorts[host]; dup {
				t.Errorf("host port %s published by %s and %s", host, other, name)
			}
			hostPorts[host] = name
		}
	}
}
