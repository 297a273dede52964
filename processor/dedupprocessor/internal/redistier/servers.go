package redistier

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// servers tells when a Redis server not seen before answers: a restarted
// master (a new run_id) or a promoted replica, which may have lost the last
// writes (without persistence, everything), so the caller stops trusting
// what it cached of Redis (Options.OnNewServer). Every new connection asks
// its run_id; the servers seen at connect are the baseline.
type servers struct {
	mu    sync.Mutex
	seen  map[string]bool
	armed bool
	fn    func(runID string)
}

// onConnect is the go-redis OnConnect hook: it never fails a connection.
func (s *servers) onConnect(ctx context.Context, cn *redis.Conn) error {
	info, err := cn.Info(ctx, "server").Result()
	if err != nil {
		return nil // INFO refused (an ACL, a managed service): nothing known
	}
	id := runID(info)
	if id == "" {
		return nil
	}
	s.mu.Lock()
	report := !s.seen[id] && s.armed && s.fn != nil
	s.seen[id] = true
	s.mu.Unlock()
	if report {
		s.fn(id)
	}
	return nil
}

func runID(info string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
