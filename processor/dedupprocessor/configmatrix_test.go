package dedupprocessor

// The config matrix beyond testdata/config.yaml: every setting, invalid in
// every way a user is likely to get it wrong, with the exact error the
// collector prints (unmarshal errors come from confmap, the rest from
// Validate), and the edge values that are accepted, with what they mean.

import (
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
)

// decodeInline unmarshals an inline YAML dedup config the way the collector
// does: confmap with unknown keys refused, then every Validate in the tree.
func decodeInline(t *testing.T, yaml string) (cfg *Config, unmarshalErr, validateErr error) {
	t.Helper()
	r, err := confmap.NewRetrievedFromYAML([]byte(yaml))
	if err != nil {
		t.Fatalf("test bug: YAML %q: %v", yaml, err)
	}
	cm, err := r.AsConf()
	if err != nil {
		t.Fatalf("test bug: YAML %q: %v", yaml, err)
	}
	cfg = defaultConfig()
	if err := cm.Unmarshal(cfg); err != nil {
		return cfg, err, nil
	}
	return cfg, nil, confmap.Validate(cfg)
}

const decodePrefix = "decoding failed due to the following error(s):\n\n"

func TestConfigMatrixUnmarshalErrors(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		// storage is a component ID.
		{`storage: "file storage"`, `'storage' in "file storage" id: invalid character(s) in type "file storage"`},
		{`storage: ""`, `'storage' id must not be empty`},
		{`storage: /dedup`, `'storage' in "/dedup" id: the part before / should not be empty`},
		{`storage: file_storage/`, `'storage' in "file_storage/" id: the part after / should not be empty`},
		{`storage: 5`, `'storage' expected a map or struct, got "int"`},
		// Durations.
		{`snapshot_interval: often`, `'snapshot_interval' time: invalid duration`},
		{`window: forever`, `'window' time: invalid duration`},
		{`window: ""`, `'window' time: invalid duration`},
		// Types.
		{`cache: {max_entries: many}`, `'cache.max_entries' expected type 'int', got unconvertible type 'string'`},
		{`cache: 7`, `'cache' expected a map or struct, got "int"`},
		{`mark_attribute: 5`, `'mark_attribute' expected type 'string', got unconvertible type 'int'`},
		{`logs: {key: [1]}`, `'logs.key[0]' expected type 'string', got unconvertible type 'int'`},
		{`redis: []`, `'redis' '' expected a map or struct, got "slice"`},
		{`redis: {endpoints: ["a:1"], password: 12345}`, `'redis' ` + decodePrefix + `'password' expected type 'configopaque.String', got unconvertible type 'int'`},
		// Unknown keys, at every level.
		{`windw: 5m`, `'dedupprocessor.Config' has invalid keys: windw`},
		{`cache: {max_entry: 5}`, `'cache' has invalid keys: max_entry`},
		{`logs: {keys: ['attributes["id"]']}`, `'logs' has invalid keys: keys`},
		{`traces: {condition: []}`, `'traces' has invalid keys: condition`},
		{`metrics: {ignores: []}`, `'metrics' has invalid keys: ignores`},
		{`redis: {endpoint: "a:1"}`, `'redis' ` + decodePrefix + `'dedupprocessor.RedisConfig' has invalid keys: endpoint`},
		// The shared tier sizes itself: there is no capacity to set.
		{`redis: {endpoints: ["a:1"], capacity: 1000000}`, `'redis' ` + decodePrefix + `'dedupprocessor.RedisConfig' has invalid keys: capacity`},
		{`redis: {endpoints: ["a:1"], tls: {ca: x}}`, `'redis' ` + decodePrefix + `'tls' ` + decodePrefix + `'configtls.ClientConfig' has invalid keys: ca`},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			_, uerr, verr := decodeInline(t, tt.yaml)
			if uerr == nil {
				t.Fatalf("unmarshal accepted it (validate: %v)", verr)
			}
			if got, want := uerr.Error(), decodePrefix+tt.want; got != want {
				t.Fatalf("unmarshal error\n%q\nwant\n%q", got, want)
			}
		})
	}
}

func TestConfigMatrixValidateErrors(t *testing.T) {
	const ignorableLogs = `body, event_name, severity_text, severity_number, trace_id, span_id, time_unix_nano, observed_time_unix_nano, flags, resource, instrumentation_scope`
	for _, tt := range []struct{ yaml, want string }{
		{`action: ""`, `action must be "drop" or "mark", got ""`},
		{`action: DROP`, `action must be "drop" or "mark", got "DROP"`},
		{`on_missing_key: PASS`, `on_missing_key must be "pass", "content" or "drop", got "PASS"`},
		{`on_missing_key: ""`, `on_missing_key must be "pass", "content" or "drop", got ""`},
		{`cache: {max_entries: 100000001}`, `cache.max_entries must be between 1 and 100000000, got 100000001`},
		{`cache: {max_entries: -1}`, `cache.max_entries must be between 1 and 100000000, got -1`},
		{`snapshot_interval: -1ns`, `snapshot_interval must be >= 0 (0 saves only at shutdown), got "-1ns"`},
		{`pending_wait: -1ms`, `pending_wait must be >= 0 (0 refuses at once), got "-1ms"`},
		{`redis: {endpoints: ["a:1"], lease: 500ms, timeout: 250ms}`, `redis.lease must be at least 3 times redis.timeout (250ms): a claim is renewed every third of its lease, each renewal bounded by the timeout, got "500ms"`},
		{`redis: {endpoints: ["a:1"], key_prefix: "fleet:{a}:"}`, `redis.key_prefix must not contain "{" or "}": a hash tag in the prefix puts every key of a Redis Cluster into one slot and breaks the tier's own tags (CROSSSLOT), got "fleet:{a}:"`},
		{`metadata_keys: [" "]`, `metadata_keys[0]: must not be empty`},
		{`metadata_keys: [ok, ""]`, `metadata_keys[1]: must not be empty`},
		{`logs: {key: [null]}`, `logs.key[0]: expression must not be empty`},
		{`traces: {key: [""]}`, `traces.key[0]: expression must not be empty`},
		{`metrics: {key: [metric.name, "  "]}`, `metrics.key[1]: expression must not be empty`},
		{`traces: {conditions: ["name =="]}`, `traces.conditions[0] "name ==": 1:8: condition has invalid syntax: (expected Field ("." Field)*)`},
		{`logs: {key: [name]}`, `logs.key[0] "name": 1:1: segment "name" from path "name" is not a valid path nor a valid OTTL keyword for the log context - review https://github.com/open-telemetry/opentelemetry-collector-contrib/tree/main/pkg/ottl/contexts/ottllog to see all valid paths`},
		{`logs: {ignore: [observed_timestamp, 'attributes["ok"]', bogus]}`,
			`logs.ignore[0] "observed_timestamp": not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of ` + ignorableLogs + "\n" +
				`logs.ignore[2] "bogus": not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of ` + ignorableLogs},
		{`metrics: {ignore: [body]}`, `metrics.ignore[0] "body": not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of start_time_unix_nano, time_unix_nano, resource, instrumentation_scope`},
		{`traces: {key: [], ignore: [links, bogus]}`, `traces.ignore[1] "bogus": not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of name, kind, trace_id, span_id, parent_span_id, trace_state, start_time_unix_nano, end_time_unix_nano, flags, events, links, status, resource, instrumentation_scope`},
		// redis: present (even empty or null) means the shared tier is on.
		{`redis:`, `redis.endpoints must list at least one "host:port"`},
		{`redis: {}`, `redis.endpoints must list at least one "host:port"`},
		{`redis: {endpoints: ["host:"]}`, `redis.endpoints[0] must be "host:port", got "host:"`},
		{`redis: {endpoints: ["a:1", "redis.internal"]}`, `redis.endpoints[1] must be "host:port", got "redis.internal"`},
		{`redis: {endpoints: ["a:1"], db: -1}`, `redis.db must be >= 0, got -1`},
		{`redis: {endpoints: ["a:1", "b:2"], db: 1}`, `redis.db must be 0 with several endpoints (a Redis Cluster has only database 0), got 1`},
		{`redis: {endpoints: ["a:1"], mode: cluster, db: 1}`, `redis.db must be 0 with redis.mode "cluster" (a Redis Cluster has only database 0), got 1`},
		{`redis: {endpoints: ["a:1"], mode: Cluster}`, `redis.mode must be "auto", "standalone", "cluster" or "sentinel", got "Cluster"`},
		{`redis: {endpoints: ["a:1"], mode: ""}`, `redis.mode must be "auto", "standalone", "cluster" or "sentinel", got ""`},
		{`redis: {endpoints: ["a:1"], mode: cluster, master_name: m}`, `redis.master_name is for Sentinel: remove it, or set redis.mode to "sentinel" (or "auto"), got mode "cluster"`},
		{`redis: {endpoints: ["a:1"], cluster_slots: 1001}`, `redis.cluster_slots must be the hash slots a Redis Cluster's dedup keys spread over (the masters, or a multiple of them), from 1 to 1000, got 1001`},
		{`{window: 2200h, redis: {endpoints: ["a:1"]}}`, `window must be at most 2160h0m0s (90 days) with redis, got "2200h0m0s"`},
		{`redis: {endpoints: ["a:1"], timeout: -1s}`, `redis.timeout must be > 0, got "-1s"`},
		{`redis: {endpoints: ["a:1"], timeout: 0s}`, `redis.timeout must be > 0, got "0s"`},
		{`redis: {endpoints: ["a:1"], lease: 0s}`, `redis.lease must be >= 1ms, got "0s"`},
		{`redis: {endpoints: ["a:1"], lease: 11m}`, `redis.lease must be <= window (10m0s), got "11m0s": redis.lease is 30s unless set; set it to at most the window (e.g. lease: 10m0s), or a window of at least the lease`},
		// A window shorter than the default lease: the error names the lease,
		// which the user may never have written, and says what to set.
		{`{window: 20s, redis: {endpoints: ["a:1"]}}`, `redis.lease must be <= window (20s), got "30s": redis.lease is 30s unless set; set it to at most the window (e.g. lease: 20s), or a window of at least the lease`},
		{`redis: {endpoints: ["a:1"], on_error: ""}`, `redis.on_error must be "pass" or "refuse", got ""`},
		{`redis: {endpoints: ["a:1"], on_error: drop}`, `redis.on_error must be "pass" or "refuse", got "drop"`},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			_, uerr, verr := decodeInline(t, tt.yaml)
			if uerr != nil {
				t.Fatalf("unmarshal: %v", uerr)
			}
			if verr == nil || verr.Error() != tt.want {
				t.Fatalf("validate error\n%v\nwant\n%s", verr, tt.want)
			}
		})
	}
}

// TestConfigMatrixRedisTLSErrors: configtls' own checks reach the user, in
// the collector's recursive validation, as a first line naming redis: tls.
func TestConfigMatrixRedisTLSErrors(t *testing.T) {
	for _, tt := range []struct{ yaml, want string }{
		{`{ca_file: /etc/ca.pem, ca_pem: "x"}`, `redis: tls: provide either a CA file or the PEM-encoded string, but not both`},
		{`{min_version: "0.9"}`, `redis: tls: invalid TLS min_version: unsupported TLS version: "0.9"`},
		{`{min_version: "1.3", max_version: "1.2"}`, `redis: tls: invalid TLS configuration: min_version cannot be greater than max_version`},
		{`{cert_file: /etc/cert.pem}`, `redis: tls: TLS configuration must include both certificate and key (CertFile/CertPem and KeyFile/KeyPem)`},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			_, uerr, verr := decodeInline(t, `redis: {endpoints: ["a:1"], tls: `+tt.yaml+`}`)
			if uerr != nil {
				t.Fatalf("unmarshal: %v", uerr)
			}
			if verr == nil {
				t.Fatal("accepted")
			}
			lines := strings.Split(verr.Error(), "\n")
			if lines[0] != tt.want {
				t.Fatalf("first line %q, want %q (all: %q)", lines[0], tt.want, verr.Error())
			}
			t.Logf("the whole error, as the collector prints it: %q", verr.Error())
		})
	}
}

// TestConfigMatrixAcceptedEdges: settings at their edges that are valid,
// and what they decode to.
func TestConfigMatrixAcceptedEdges(t *testing.T) {
	for _, tt := range []struct {
		yaml  string
		check func(t *testing.T, c *Config)
	}{
		{`storage: file_storage/dedup`, func(t *testing.T, c *Config) {
			if c.Storage == nil || *c.Storage != component.MustNewIDWithName("file_storage", "dedup") {
				t.Fatalf("storage = %v", c.Storage)
			}
		}},
		{`snapshot_interval: 0s`, func(t *testing.T, c *Config) {
			if c.SnapshotInterval != 0 {
				t.Fatalf("snapshot_interval = %v, want 0 (save only at shutdown)", c.SnapshotInterval)
			}
		}},
		{`cache: {max_entries: 1}`, func(t *testing.T, c *Config) {
			if c.Cache.MaxEntries != 1 {
				t.Fatal(c.Cache.MaxEntries)
			}
		}},
		{`cache: {max_entries: 100000000}`, func(t *testing.T, c *Config) {
			if c.Cache.MaxEntries != 100_000_000 {
				t.Fatal(c.Cache.MaxEntries)
			}
		}},
		{`metadata_keys: X-Scope-OrgID`, func(t *testing.T, c *Config) { // a scalar is a list of one
			if len(c.MetadataKeys) != 1 || c.MetadataKeys[0] != "X-Scope-OrgID" {
				t.Fatalf("metadata_keys = %q", c.MetadataKeys)
			}
		}},
		{`redis: {endpoints: "127.0.0.1:6379"}`, func(t *testing.T, c *Config) {
			if r := c.Redis.Get(); r == nil || len(r.Endpoints) != 1 || r.Endpoints[0] != "127.0.0.1:6379" {
				t.Fatalf("redis = %+v", c.Redis.Get())
			}
		}},
		{`redis: {endpoints: [":6379", "[::1]:6379"], master_name: mymaster, db: 3}`, func(t *testing.T, c *Config) {
			// Sentinel: several endpoints are sentinels, and db is allowed.
			if r := c.Redis.Get(); r.MasterName != "mymaster" || r.DB != 3 {
				t.Fatalf("redis = %+v", r)
			}
		}},
		{`redis: {endpoints: ["a:1"]}`, func(t *testing.T, c *Config) {
			if m := c.Redis.Get().Mode; m != RedisModeAuto {
				t.Fatalf("redis.mode = %q, want the default auto", m)
			}
		}},
		{`redis: {endpoints: ["a:1"], mode: sentinel, master_name: m, db: 1}`, func(t *testing.T, c *Config) {
			if r := c.Redis.Get(); r.Mode != RedisModeSentinel || r.MasterName != "m" {
				t.Fatalf("redis = %+v", r)
			}
		}},
		{`redis: {endpoints: ["a:1"], tls: {}}`, func(t *testing.T, c *Config) {
			if !c.Redis.Get().TLS.HasValue() {
				t.Fatal("tls: {} must turn TLS on with the defaults")
			}
		}},
		// The lease set to fit a short window.
		{`{window: 20s, redis: {endpoints: ["a:1"], lease: 5s}}`, func(t *testing.T, c *Config) {
			if l := c.Redis.Get().Lease; l != 5*time.Second {
				t.Fatalf("redis.lease = %v, want the 5s set", l)
			}
		}},
		{`redis: {endpoints: ["a:1"], tls: {insecure: true}, username: u, password: p, key_prefix: "", lease: 10m, timeout: 1ns}`, func(t *testing.T, c *Config) {
			r := c.Redis.Get()
			if r.Username != "u" || string(r.Password) != "p" || r.Lease != 10*time.Minute || r.Timeout != time.Nanosecond {
				t.Fatalf("redis = %+v", r)
			}
		}},
	} {
		t.Run(tt.yaml, func(t *testing.T) {
			c, uerr, verr := decodeInline(t, tt.yaml)
			if uerr != nil || verr != nil {
				t.Fatalf("unmarshal: %v, validate: %v", uerr, verr)
			}
			tt.check(t, c)
		})
	}
}
