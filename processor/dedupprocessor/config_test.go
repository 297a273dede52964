package dedupprocessor

import (
	"path/filepath"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
)

// loadConfig unmarshals one named config from testdata/config.yaml the way
// the collector does, and validates it.
func loadConfig(t *testing.T, name string) (*Config, error, error) {
	t.Helper()
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sub, err := cm.Sub(component.MustNewIDWithName("dedup", name).String())
	if err != nil {
		t.Fatal(err)
	}
	if name == "" {
		sub, err = cm.Sub("dedup")
		if err != nil {
			t.Fatal(err)
		}
	}
	cfg := createDefaultConfig().(*Config)
	if err := sub.Unmarshal(cfg); err != nil {
		return cfg, err, nil
	}
	return cfg, nil, confmap.Validate(cfg)
}

func TestLoadValidConfigs(t *testing.T) {
	tests := []struct {
		name string
		want func(*Config)
	}{
		{name: "", want: func(*Config) {}},
		{name: "keyed", want: func(c *Config) {
			c.Window = 5 * time.Minute
			c.Logs.Key = []string{`attributes["event.id"]`, `resource.attributes["service.name"]`}
			c.Logs.Conditions = []string{`severity_number >= SEVERITY_NUMBER_INFO`}
		}},
		{name: "person_event_second", want: func(c *Config) {
			c.Window = time.Hour
			c.OnMissingKey = MissingKeyContent
			c.Logs.Key = []string{`attributes["person.id"]`, `event_name`, `Unix(Int(time_unix_nano / 1000000000))`}
		}},
		{name: "mark", want: func(c *Config) {
			c.Action = ActionMark
			c.MarkAttribute = "dedup.seen_before"
		}},
		{name: "events", want: func(c *Config) {
			c.Window = 24 * time.Hour
			c.Cache.MaxEntries = 5000000
			c.Logs.Key = []string{`attributes["messageId"]`}
			c.Logs.Conditions = []string{`attributes["messageId"] != nil`}
		}},
		{name: "traces_and_ha_metrics", want: func(c *Config) {
			c.Traces.Key = []string{}
			c.Traces.Ignore = []string{`attributes["retry.count"]`}
			c.Metrics.Ignore = []string{`resource.attributes["replica"]`}
		}},
		{name: "ha_election", want: func(c *Config) {
			c.Metrics.ReplicaElection = configoptional.Some(ElectionConfig{
				ClusterLabel: "cluster", ReplicaLabel: "__replica__",
				UpdateInterval: 15 * time.Second, UpdateJitter: 5 * time.Second, FailoverTimeout: 30 * time.Second,
				MaxClusters: 100, RemoveReplicaLabel: true,
			})
		}},
		{name: "ha_election_tuned", want: func(c *Config) {
			c.MetadataKeys = []string{"X-Scope-OrgID"}
			c.Metrics.ReplicaElection = configoptional.Some(ElectionConfig{
				ClusterLabel: "k8s.cluster.name", ReplicaLabel: "prometheus_replica",
				UpdateInterval: 10 * time.Second, UpdateJitter: 2 * time.Second, FailoverTimeout: 20 * time.Second,
				MaxClusters: 50, RemoveReplicaLabel: false,
			})
		}},
		{name: "tenants", want: func(c *Config) {
			c.MetadataKeys = []string{"X-Scope-OrgID"}
		}},
		{name: "authenticated_tenants", want: func(c *Config) {
			c.AuthAttributes = []string{"subject"}
			c.Logs.Key = []string{`attributes["event.id"]`}
		}},
		{name: "persistent", want: func(c *Config) {
			id := component.MustNewID("file_storage")
			c.Storage = &id
			c.SnapshotInterval = 30 * time.Second
		}},
		{name: "redis", want: func(c *Config) {
			c.Logs.Key = []string{`attributes["event.id"]`}
			c.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12,
				Endpoints: []string{"127.0.0.1:6379"}, Mode: RedisModeAuto,
				Timeout: 250 * time.Millisecond, Lease: 30 * time.Second, OnError: ErrorPass,
			})
		}},
		{name: "redis_cluster", want: func(c *Config) {
			tls := configtls.ClientConfig{}
			tls.CAFile = "testdata/tls/ca.pem"
			c.Redis = configoptional.Some(RedisConfig{ClusterSlots: 30,
				Endpoints: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, Mode: RedisModeAuto,
				Username: "dedup", Password: "s3cret", TLS: configoptional.Some(tls), KeyPrefix: "dedup:prod:",
				Timeout: 100 * time.Millisecond, Lease: time.Minute, OnError: ErrorRefuse,
			})
		}},
		{name: "redis_sentinel", want: func(c *Config) {
			c.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12,
				Endpoints:  []string{"127.0.0.1:26379", "127.0.0.2:26379"},
				MasterName: "mymaster", DB: 2, Mode: RedisModeAuto,
				Timeout: 250 * time.Millisecond, Lease: 30 * time.Second, OnError: ErrorPass,
			})
		}},
		{name: "redis_configuration_endpoint", want: func(c *Config) {
			c.Redis = configoptional.Some(RedisConfig{ClusterSlots: 12,
				Endpoints: []string{"clustercfg.dedup.example.internal:6379"}, Mode: RedisModeCluster,
				Timeout: 250 * time.Millisecond, Lease: 30 * time.Second, OnError: ErrorRefuse,
			})
		}},
		{name: "sources_by_pod", want: func(c *Config) {
			c.Source.Key = []string{`resource.attributes["k8s.namespace.name"]`, `resource.attributes["k8s.pod.name"]`}
			c.Source.MaxSources = 50
			c.Source.LogInterval = 5 * time.Minute
		}},
		{name: "sources_by_client", want: func(c *Config) {
			c.Source.Key = []string{"auth.subject", "client.address"}
			c.Source.LogInterval = 0
		}},
		{name: "no_sources", want: func(c *Config) { c.Source.Key = []string{} }},
		{name: "content_ignore", want: func(c *Config) {
			c.Cache.MaxEntries = 50000
			c.Logs.Ignore = []string{`attributes["delivery.attempt"]`, `resource.attributes["relay.host"]`}
		}},
	}
	for _, tt := range tests {
		t.Run("dedup/"+tt.name, func(t *testing.T) {
			got, uerr, verr := loadConfig(t, tt.name)
			if uerr != nil || verr != nil {
				t.Fatalf("unmarshal: %v, validate: %v", uerr, verr)
			}
			want := createDefaultConfig().(*Config)
			tt.want(want)
			assertConfigEqual(t, got, want)
		})
	}
}

func assertConfigEqual(t *testing.T, got, want *Config) {
	t.Helper()
	gm, wm := confmap.New(), confmap.New()
	if err := gm.Marshal(got); err != nil {
		t.Fatal(err)
	}
	if err := wm.Marshal(want); err != nil {
		t.Fatal(err)
	}
	if g, w := gm.ToStringMap(), wm.ToStringMap(); !equalMaps(g, w) {
		t.Fatalf("config = %#v\nwant %#v", g, w)
	}
}

func equalMaps(a, b map[string]any) bool {
	ca, cb := confmap.NewFromStringMap(a), confmap.NewFromStringMap(b)
	return fmtMap(ca) == fmtMap(cb)
}

func fmtMap(c *confmap.Conf) string {
	out := ""
	for _, k := range sortedKeys(c.AllKeys()) {
		out += k + "=" + fmtAny(c.Get(k)) + "\n"
	}
	return out
}

func TestLoadInvalidConfigs(t *testing.T) {
	tests := []struct {
		name      string
		unmarshal string // exact unmarshal error, if the failure is there
		validate  string // exact validation error
	}{
		{name: "bad_window", validate: `window must be > 0, got "0s"`},
		{name: "unitless_window", validate: `window must be >= 1ms, got "600ns" (a number without a unit is nanoseconds: write e.g. 10m)` + "\n" +
			`snapshot_interval must be 0 or >= 1ms, got "5ns" (a number without a unit is nanoseconds: write e.g. 1m)`},
		{name: "bad_action", validate: `action must be "drop" or "mark", got "delete"`},
		{name: "bad_on_missing_key", validate: `on_missing_key must be "pass", "content" or "drop", got "keep"`},
		{name: "bad_max_entries", validate: `cache.max_entries must be between 1 and 100000000, got 0`},
		{name: "empty_mark_attribute", validate: `mark_attribute must not be empty when action is "mark"`},
		{name: "bad_key_ottl", validate: `logs.key[0] "attributes[\"event.id\"": 1:22: expression has invalid syntax: (expected "]")`},
		{name: "bad_condition", validate: "logs.conditions[0] \"severity_number >>> 3\": 1:18: condition has invalid syntax near `>> 3`: (expected Field (\".\" Field)*)"},
		{name: "empty_key", validate: `logs.key[0]: expression must not be empty`},
		{name: "bad_ignore", validate: `logs.ignore[0] "observed_timestamp": not an ignorable field; use attributes["k"], resource.attributes["k"], instrumentation_scope.attributes["k"] or one of body, event_name, severity_text, severity_number, trace_id, span_id, time_unix_nano, observed_time_unix_nano, flags, resource, instrumentation_scope`},
		{name: "ignore_with_key", validate: `logs.ignore applies only to the content identity: set logs.key to [] or remove logs.ignore`},
		{name: "traces_ignore_with_key", validate: `traces.ignore applies only to the content identity: set traces.key to [] or remove traces.ignore`},
		{name: "bad_metrics_key", validate: `metrics.key[0] "metric.nme": segment "nme" from path "metric.nme" is not a valid path nor a valid OTTL keyword for the metric context - review https://github.com/open-telemetry/opentelemetry-collector-contrib/tree/main/pkg/ottl/contexts/ottlmetric to see all valid paths`},
		{name: "empty_metadata_key", validate: `metadata_keys[0]: must not be empty`},
		{name: "empty_auth_attribute", validate: `auth_attributes[1]: must not be empty (name an attribute the authenticator sets, e.g. "subject")`},
		{name: "bad_snapshot_interval", validate: `snapshot_interval must be >= 0 (0 saves only at shutdown), got "-1s"`},
		{name: "redis_bad", validate: `redis.endpoints[0] must be "host:port", got "localhost"` + "\n" +
			`redis.db must be 0 with several endpoints (a Redis Cluster has only database 0), got 3` + "\n" +
			`redis.timeout must be > 0, got "0s"` + "\n" +
			`redis.lease must be <= window (1m0s), got "2m0s": redis.lease is 30s unless set; set it to at most the window (e.g. lease: 1m0s), or a window of at least the lease` + "\n" +
			`redis.on_error must be "pass" or "refuse", got "ignore"`},
		{name: "election_bad", validate: `metrics.replica_election.cluster_label must not be empty (Mimir's default is "cluster")` + "\n" +
			`metrics.replica_election.replica_label must not be empty (Mimir's default is "__replica__")` + "\n" +
			`metrics.replica_election.update_interval must be >= 1ms, got "15ns" (a number without a unit is nanoseconds: write e.g. 15s)` + "\n" +
			`metrics.replica_election.update_jitter must be >= 0, got "-1s"` + "\n" +
			`metrics.replica_election.max_clusters must be between 1 and 100000, got 0`},
		{name: "election_failover_too_short", validate: `metrics.replica_election.cluster_label and replica_label must differ, both are "replica"` + "\n" +
			`metrics.replica_election.failover_timeout must be > update_interval + update_jitter (25s), or the elected replica loses its election between two refreshes; got "25s"`},
		{name: "redis_tls_missing_file", validate: `redis.tls: failed to load TLS config: failed to load CA CertPool File: failed to load cert testdata/tls/missing-ca.pem: open testdata/tls/missing-ca.pem: no such file or directory`},
		{name: "redis_short_window", validate: `redis.lease must be <= window (20s), got "30s": redis.lease is 30s unless set; set it to at most the window (e.g. lease: 20s), or a window of at least the lease`},
		{name: "redis_no_endpoints", validate: `redis.endpoints must list at least one "host:port"`},
		{name: "redis_bad_mode", validate: `redis.mode must be "auto", "standalone", "cluster" or "sentinel", got "ring"`},
		{name: "redis_sentinel_without_master", validate: `redis.master_name must name the master the Sentinels monitor with redis.mode "sentinel"`},
		{name: "redis_mode_contradicts", validate: `redis.endpoints must list one server with redis.mode "standalone", got 2` + "\n" +
			`redis.master_name is for Sentinel: remove it, or set redis.mode to "sentinel" (or "auto"), got mode "standalone"`},
		{name: "many_errors", validate: `window must be > 0, got "-1s"` + "\n" +
			`action must be "drop" or "mark", got "delete"` + "\n" +
			`on_missing_key must be "pass", "content" or "drop", got "keep"` + "\n" +
			`cache.max_entries must be between 1 and 100000000, got -5`},
		{name: "bad_source", validate: `source.key[0] "attributes[\"peer\"]": a record's own attributes do not name its sender: name a resource attribute (resource.attributes["service.name"]), an attribute of the authenticated client (auth.subject), a client metadata key (metadata.x-scope-orgid) or client.address` + "\n" +
			`source.key[1] "host.name": not a source (the resource attribute is resource.attributes["host.name"]): name a resource attribute (resource.attributes["service.name"]), an attribute of the authenticated client (auth.subject), a client metadata key (metadata.x-scope-orgid) or client.address` + "\n" +
			`source.key[2] "auth.": not a source: name a resource attribute (resource.attributes["service.name"]), an attribute of the authenticated client (auth.subject), a client metadata key (metadata.x-scope-orgid) or client.address` + "\n" +
			`source.max_sources must be between 1 and 1000 (the sources named in the metrics; the rest are counted as "(other)"), got 0` + "\n" +
			`source.log_interval must be >= 0 (0: no log lines), got "-1m0s"`},
		{name: "unknown_field", unmarshal: "decoding failed due to the following error(s):\n\n'dedupprocessor.Config' has invalid keys: windw"},
	}
	for _, tt := range tests {
		t.Run("dedup/"+tt.name, func(t *testing.T) {
			_, uerr, verr := loadConfig(t, tt.name)
			if tt.unmarshal != "" {
				if uerr == nil || uerr.Error() != tt.unmarshal {
					t.Fatalf("unmarshal error = %v\nwant %s", uerr, tt.unmarshal)
				}
				return
			}
			if uerr != nil {
				t.Fatalf("unmarshal: %v", uerr)
			}
			if verr == nil || verr.Error() != tt.validate {
				t.Fatalf("validate error =\n%v\nwant\n%s", verr, tt.validate)
			}
		})
	}
}
