package redistier

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// servers tells when a server not seen before answers: a restarted master (new
// run_id) or promoted replica may have lost the last writes, so the caller
// stops trusting its cache of Redis (OnNewServer). The servers seen at connect
// are the baseline.
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
	var id string
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(line, "run_id:"); ok {
			id = strings.TrimSpace(v)
		}
	}
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
