package redistest

import (
	"context"
	"slices"
	"strconv"
	"strings"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
)

// SentinelServers is a master, one replica and one sentinel monitoring them.
type SentinelServers struct {
	MasterName string
	Master     *Server
	Replica    *Server
	Sentinel   *Server
}

// SentinelAddr returns the sentinel's endpoint.
func (s *SentinelServers) SentinelAddr() string { return s.Sentinel.Addr() }

// Sentinel starts a master, a replica of it and a sentinel that monitors the
// master as "mymaster" with quorum 1 and a 1 s down-after period. It waits
// until the replica is in sync and the sentinel reports the master's address
// and knows the replica. opts apply to the master and the replica (an ACL
// user, say); the sentinel reaches them as the default user.
func Sentinel(tb testkit.TB, opts ...Option) *SentinelServers {
	tb.Helper()
	const name = "mymaster"
	// No 5 s wait for more replicas before the first sync.
	master := Standalone(tb, append(slices.Clip(opts), WithConfig("repl-diskless-sync-delay 0"))...)
	replica := Replica(tb, master, opts...)

	ctx := context.Background()
	// Started after the replica is in sync, the sentinel's first INFO to the
	// master already lists the replica (the next one comes 10 s later).
	sentinel := newServer(tb, config{extra: []string{
		"sentinel monitor " + name + " 127.0.0.1 " + strconv.Itoa(master.Port()) + " 1",
		"sentinel down-after-milliseconds " + name + " 1000",
		"sentinel failover-timeout " + name + " 5000",
	}})
	sentinel.args = []string{"--sentinel"}
	sentinel.startFresh()

	wantMaster := []string{"127.0.0.1", strconv.Itoa(master.Port())}
	waitFor(tb, readyTimeout, "sentinel knows the master and its replica", func() (bool, string) {
		addr, err := sentinel.Client().Do(ctx, "SENTINEL", "get-master-addr-by-name", name).StringSlice()
		if err != nil || len(addr) != 2 || addr[0] != wantMaster[0] || addr[1] != wantMaster[1] {
			return false, "master: " + strings.Join(addr, ":")
		}
		replicas, err := sentinel.Client().Do(ctx, "SENTINEL", "replicas", name).Slice()
		return err == nil && len(replicas) == 1, "replicas: " + strconv.Itoa(len(replicas))
	})
	return &SentinelServers{MasterName: name, Master: master, Replica: replica, Sentinel: sentinel}
}

// Replica starts a standalone replica of master (started with the same
// credentials, if any) and waits until it is in sync. A master started with
// the config line "repl-diskless-sync-delay 0" syncs it at once.
func Replica(tb testkit.TB, master *Server, opts ...Option) *Server {
	tb.Helper()
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	cfg.extra = append(cfg.extra, "replicaof 127.0.0.1 "+strconv.Itoa(master.Port()))
	switch {
	case master.cfg.password != "":
		cfg.extra = append(cfg.extra, "masterauth "+quote(master.cfg.password))
	case master.cfg.aclUser != "":
		cfg.extra = append(cfg.extra, "masteruser "+quote(master.cfg.aclUser), "masterauth "+quote(master.cfg.aclPass))
	}
	replica := newServer(tb, cfg)
	replica.startFresh()
	waitFor(tb, readyTimeout, "replica in sync", func() (bool, string) {
		info, err := replica.Client().Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up"), info
	})
	return replica
}
