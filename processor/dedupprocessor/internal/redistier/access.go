package redistier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Denied reports whether err says Redis refused the tier's credentials
// (WRONGPASS, NOAUTH) or a command or key to its user (NOPERM; inside a
// script, Redis 7.0 answers "ERR The user executing the script can't ..."):
// nothing the tier retries or waits out mends it, an operator does, in the
// collector's settings or in Redis's ACL.
func Denied(err error) bool {
	var reply redis.Error
	return err != nil && (redis.IsAuthError(err) || redis.IsPermissionError(err) ||
		errors.As(err, &reply) && strings.Contains(reply.Error(), "The user executing the script can't"))
}

// Unknown returns why the tier's topology is not known, or nil once it is.
func (t *Tier) Unknown() error {
	if t.conn.Load() != nil {
		return nil
	}
	return *t.unknown.Load()
}

// accessScript asks of Redis what every claim asks, claiming nothing: to run
// a script (EVALSHA, then EVAL on NOSCRIPT), to read Redis's clock inside
// one, and to read a key under KeyPrefix (one nothing stores).
var accessScript = newScript("access", `
redis.call('TIME')
if #KEYS > 0 then redis.call('EXISTS', KEYS[1]) end
return 1`)

// Access asks Redis, at start, what the tier's calls will ask of it, so that
// a user who may not is named before the first batch: every master runs the
// script, and the master of a key under KeyPrefix reads it (in a Cluster,
// one master: users are per node, and key patterns seldom differ between
// them). It returns the refusals, each naming its node, or nil; an error that
// is not a refusal (a timeout) is left to the calls. Needs a known Mode.
func (t *Tier) Access(ctx context.Context) error {
	c := t.conn.Load()
	if c == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, max(t.opts.Timeout, minProbeTimeout))
	defer cancel()
	key := []string{t.opts.KeyPrefix + "access"}
	var mu sync.Mutex // ForEachMaster asks the masters at once
	var errs []error
	ask := func(ctx context.Context, node string, s redis.Scripter, keys []string) {
		if err := accessScript.Run(ctx, s, keys).Err(); Denied(err) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%s: %w", node, err))
			mu.Unlock()
		}
	}
	switch x := c.exec.(type) {
	case *singleExec:
		ask(ctx, x.name, x.client, key)
	case *clusterExec:
		err := x.cc.ForEachMaster(ctx, func(ctx context.Context, client *redis.Client) error {
			ask(ctx, client.Options().Addr, client, nil)
			return nil
		})
		if Denied(err) { // the map of slots was refused (CLUSTER SLOTS)
			return err
		}
		ask(ctx, "the master of "+key[0], x.cc, key)
	}
	return errors.Join(errs...)
}
