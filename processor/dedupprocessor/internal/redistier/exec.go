package redistier

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/breaker"
)

// call is one command of an operation, with an outcome of its own.
type call struct {
	op       string // the operation it belongs to, for Options.Observe
	cmd      *redis.Cmd
	route    string // the key the command is routed by
	group    int
	idx      []int32 // the digests (indexes into the operation's ds) it stands for
	fields   *string // a claim's packed fields, kept for the renewals' stamps
	node     string  // the node it was last sent to ("" if none)
	err      error
	redirect bool // answered MOVED or ASK: retry through the ClusterClient
	// paced: a writer flush's commit, release or renewal, sent even through
	// an open breaker. The breaker spares batches a timeout per call, the
	// writer's pace spares the node, and a commit held back until its lease
	// ended would let copies in once the node is back.
	paced bool
}

// executor sends calls to Redis and sets each call's err.
type executor interface {
	exec(ctx context.Context, calls []*call)
	// send1 sends one call of the tier's own bookkeeping (the layout's
	// shape) past the breakers: it neither waits for one nor tells one.
	send1(ctx context.Context, c *call)
	ping(ctx context.Context) // every master once, errors ignored
	breakers() []NodeBreaker
	close() error
}

// NodeBreaker is a node's breaker state: a master's address, a standalone
// endpoint, a Sentinel master.
type NodeBreaker struct {
	Node  string
	State breaker.State
}

// singleExec is the executor of a standalone server or a Sentinel's master.
type singleExec struct {
	client *redis.Client
	name   string
	br     *breaker.Breaker
}

func (x *singleExec) exec(ctx context.Context, calls []*call) {
	ticket, ok := x.br.Allow()
	if !ok {
		calls = skipUnpaced(calls, x.name)
	}
	if len(calls) == 0 {
		return
	}
	sendPipeline(ctx, x.client, calls)
	outcome := breaker.Success
	for _, c := range calls {
		c.node = x.name
		if c.err != nil {
			// Replies count: a server that refuses (OOM, READONLY) refuses all.
			outcome = failureOutcome(ctx)
		}
	}
	if ok {
		x.br.Done(ticket, outcome)
	}
}

// skipUnpaced fails the calls an open breaker keeps from node and returns
// the paced ones, to be sent all the same.
func skipUnpaced(calls []*call, node string) []*call {
	var paced []*call
	for _, c := range calls {
		if c.paced {
			paced = append(paced, c)
		} else {
			c.node, c.err = node, errBreakerOpen
		}
	}
	return paced
}

func (x *singleExec) send1(ctx context.Context, c *call) {
	c.node = x.name
	sendPipeline(ctx, x.client, []*call{c})
}

func (x *singleExec) breakers() []NodeBreaker {
	return []NodeBreaker{{Node: x.name, State: x.br.State()}}
}

func (x *singleExec) close() error { return x.client.Close() }

func (x *singleExec) ping(ctx context.Context) {
	if x.br.State() == breaker.Closed {
		_ = x.client.Ping(ctx).Err()
	}
}

// failureOutcome is a failed call's breaker outcome: a caller that gave up
// tells nothing.
func failureOutcome(ctx context.Context) breaker.Outcome {
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return breaker.Unknown
	}
	return breaker.Failure
}

// sendPipeline sends calls to a node in one round trip, and the NOSCRIPT ones
// again as EVAL.
func sendPipeline(ctx context.Context, client *redis.Client, calls []*call) {
	send := func(cs []*call) {
		if len(cs) == 1 {
			_ = client.Process(ctx, cs[0].cmd)
		} else {
			pipe := client.Pipeline()
			for _, c := range cs {
				_ = pipe.Process(ctx, c.cmd)
			}
			_, _ = pipe.Exec(ctx)
		}
		for _, c := range cs {
			c.err = c.cmd.Err()
		}
	}
	send(calls)
	if again := withSource(ctx, calls); len(again) > 0 {
		send(again)
	}
}

// withSource turns the calls answered NOSCRIPT into EVAL and returns them.
func withSource(ctx context.Context, calls []*call) []*call {
	var again []*call
	for _, c := range calls {
		if c.err == nil || !redis.HasErrorPrefix(c.err, "NOSCRIPT") {
			continue
		}
		args := c.cmd.Args()
		sha, ok := args[1].(string)
		if p, isPtr := args[1].(*string); isPtr {
			sha, ok = *p, true
		}
		if !ok {
			continue
		}
		args[0], args[1] = "eval", scriptSources[sha]
		c.cmd = redis.NewCmd(ctx, args...)
		again = append(again, c)
	}
	return again
}

// sendEach sends each call as a command of its own, all at once.
func sendEach(ctx context.Context, client *redis.ClusterClient, calls []*call) {
	var wg sync.WaitGroup
	for _, c := range calls {
		wg.Go(func() {
			c.err = client.Process(ctx, c.cmd)
			if again := withSource(ctx, []*call{c}); len(again) > 0 {
				c.err = client.Process(ctx, c.cmd)
			}
		})
	}
	wg.Wait()
}
