package redistier

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

// What a failed command says, and what the tier does about it:
//
//	error                                   node answered?  breaker   retried in the call     slot map stale?
//	connection refused/reset, EOF, timeout  no              failure   if the slot moved       yes
//	LOADING, MASTERDOWN                     unable          failure   yes                     yes
//	MOVED, ASK                              yes             success   yes (redirected)        yes
//	TRYAGAIN (slot migrating), CLUSTERDOWN  yes             success   yes                     yes
//	READONLY (a demoted master)             yes             success*  yes                     yes
//	any other error reply (OOM, NOPERM...)  yes             failure   no                      no
//	breaker open                            not asked*      -         if the slot moved       yes
//
// (*) READONLY: in a Cluster; a standalone or Sentinel master that answers
// READONLY is a failure like any other error reply. Breaker open: a writer
// flush's commits, releases and renewals are asked all the same, and their
// outcome tells the breaker nothing.

// errBreakerOpen marks a command not sent because its node's breaker was open.
var errBreakerOpen = errors.New("circuit breaker open")

// nodeDown reports whether the node did not answer (or its breaker was open),
// or cannot serve.
func nodeDown(err error) bool {
	return err != nil && (redis.IsLoadingError(err) || redis.IsMasterDownError(err) || !isReply(err))
}

// isReply reports whether err is an error reply of the server.
func isReply(err error) bool {
	var reply redis.Error
	return errors.As(err, &reply)
}

// moving reports whether err says a Cluster's slots move or recover: a retry
// can succeed soon.
func moving(err error) bool {
	return redirected(err) || redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsReadOnlyError(err)
}

// redirected reports whether err names the node that serves the key now.
func redirected(err error) bool {
	_, moved := redis.IsMovedError(err)
	_, ask := redis.IsAskError(err)
	return moved || ask
}

// isTimeout reports whether err is a timeout, a free connection's included.
func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
