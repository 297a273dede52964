package redistier

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// servers tells when a master not seen before answers: a restarted master
// (new run_id) or a promoted replica may have lost the last writes, so the
// caller stops trusting its cache of Redis (OnNewServer). The masters seen
// at connect are the baseline. Replicas (a Cluster's slot map is loaded
// through them) and Sentinels answer on connections of their own and are
// not masters: they are never reported, and a replica is reported once it
// is promoted.
type servers struct {
	mu    sync.Mutex
	seen  map[string]bool // run_ids seen as masters
	armed bool
	fn    func(runID string)
}

// onConnect is the go-redis OnConnect hook: it never fails a connection.
func (s *servers) onConnect(ctx context.Context, cn *redis.Conn) error {
	role, err := cn.Do(ctx, "role").Slice()
	if err != nil || len(role) == 0 || role[0] != "master" {
		return nil // a replica, a Sentinel, or ROLE refused (an ACL): nothing known
	}
	s.master(cn.Info(ctx, "server"))
	return nil
}

// checkMaster asks c, a master of the Cluster's slot map that was not one
// in the last map, which server it is: a replica promoted on connections it
// had as a replica runs no OnConnect.
func (s *servers) checkMaster(ctx context.Context, c *redis.Client) {
	s.master(c.Info(ctx, "server"))
}

// master notes the run_id of a master's INFO server answer, and reports it
// if it is new.
func (s *servers) master(info *redis.StringCmd) {
	id := runID(info.Val())
	if info.Err() != nil || id == "" {
		return
	}
	s.mu.Lock()
	report := !s.seen[id] && s.armed && s.fn != nil
	s.seen[id] = true
	s.mu.Unlock()
	if report {
		s.fn(id)
	}
}

// runID is the run_id of INFO server's answer, or "".
func runID(info string) string { return infoField(info, "run_id") }
