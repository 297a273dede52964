package redistier

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Replica election in the shared tier: which replica of an HA group of
// agents (a cluster) the collectors sharing this Redis deliver.
//
// One key per election (tenant and cluster, hashed to a digest by the
// caller): KeyPrefix + "elect:{" + the digest in hex + "}". It is a single
// key, so an election is atomic on one node whatever the topology; its hash
// tag is the election's own digest, so a Cluster spreads elections over its
// masters and no raw digest byte can form a tag by accident. (A KeyPrefix
// with a hash tag of its own puts every key in its slot, as for claims.)
//
// Its value is the state byte, the replica's 16-byte digest, a 16-byte claim
// token and the time, in Redis's own clock (TIME), in milliseconds:
//
//	committed: "c" replica token refreshed-at
//	pending:   "p" replica token taken-at "|" the committed value it replaces, if any
//
// Times come from the server so that collectors with skewed clocks agree on
// when an election expires. A committed election is live until refreshed-at
// + failover; its key is kept one failover timeout longer, so that the
// replica that takes it over can tell it replaces another (a failover). A
// pending election is written with the lease as TTL, like a pending claim: a
// collector that dies mid-batch blocks the cluster for the lease, no longer.
// Only digests and tokens are stored: no label value reaches Redis.

// OpElect names an election lookup (Elect) for Options.Observe.
const OpElect = "elect"

// ElectionState is the shared tier's answer for one election.
type ElectionState uint8

const (
	// ElectionLive: a committed election holds; Replica is elected for
	// Remaining more.
	ElectionLive ElectionState = iota
	// ElectionTaken: the call's token holds the election, pending. Replica
	// is the replica whose expired election it replaces, if HasPrev.
	ElectionTaken
	// ElectionPending: a pending election of another token holds it
	// (Replica is its candidate): that batch is still on its way
	// downstream.
	ElectionPending
)

// Election is one election a batch asks about or confirms.
type Election struct {
	// Key is the digest of the tenant and the cluster.
	Key digest.Digest
	// Replica is the digest of the replica label value: the candidate of
	// Elect, the replica delivered for Confirm.
	Replica digest.Digest
}

// ElectionAnswer is the answer for one Election.
type ElectionAnswer struct {
	State     ElectionState
	Replica   digest.Digest
	HasPrev   bool
	Remaining time.Duration
}

// Elect answers, for each election, which replica is elected, in one round
// trip (one per node in a Cluster). A live committed election answers
// ElectionLive. Where none is live, the call takes it for the candidate,
// pending under token for the lease (ElectionTaken): Confirm, once the
// batch was delivered, commits it; ReleaseElections gives it up. A pending
// election of another token answers ElectionPending. Retrying with the same token is safe:
// an election the token already holds answers ElectionTaken.
func (t *Tier) Elect(ctx context.Context, token string, failover time.Duration, es []Election, answers []ElectionAnswer) error {
	if len(answers) < len(es) {
		return fmt.Errorf("dedup: redis elect: %d answers for %d elections", len(answers), len(es))
	}
	if token == "" {
		return errors.New("dedup: redis elect: empty token")
	}
	answers = answers[:len(es)]
	clear(answers)
	if len(es) == 0 {
		return nil
	}
	c, err := t.connected(OpElect)
	if err != nil {
		return err
	}
	fo := strconv.FormatInt(failover.Milliseconds(), 10)
	calls := make([]*call, len(es))
	for i, el := range es {
		rep := el.Replica.Bytes()
		key := t.electionKey(el.Key)
		calls[i] = &call{cmd: redis.NewCmd(ctx, "evalsha", electScript.Hash(), 1, key,
			string(rep[:]), token, t.leaseArg, fo), route: key}
	}
	if err := t.run(ctx, c, OpElect, calls); err != nil {
		return err
	}
	return electionAnswers(calls, answers)
}

// electionAnswers decodes the answers of election script calls; on an
// error, answers are left zero.
func electionAnswers(calls []*call, answers []ElectionAnswer) error {
	for i, cl := range calls {
		a, err := electionAnswer(cl.cmd)
		if err != nil {
			clear(answers)
			return fmt.Errorf("dedup: redis elect: %w", err)
		}
		answers[i] = a
	}
	return nil
}

// CommitElected confirms the elections es, in one round trip (one per node
// in a Cluster): the batch holding them was delivered. For each
// election: a pending one of token is committed; a committed one of the
// same replica is refreshed; a free one (absent, expired) is taken,
// committed, since the replica's data was delivered. Each of these answers
// ElectionLive with Remaining the failover timeout. An election held by
// another replica (live), or pending under another token, is left alone and
// answered as Elect would, so the caller learns who holds it.
func (t *Tier) CommitElected(ctx context.Context, token string, failover time.Duration, es []Election, answers []ElectionAnswer) error {
	if len(answers) < len(es) {
		return fmt.Errorf("dedup: redis commit: %d answers for %d elections", len(answers), len(es))
	}
	answers = answers[:len(es)]
	clear(answers)
	if len(es) == 0 {
		return nil
	}
	c, err := t.connected(OpCommit)
	if err != nil {
		return err
	}
	ws := make([]write, len(es))
	for i, el := range es {
		ws[i] = write{op: OpCommit, token: token, election: &electionWrite{key: el.Key, replica: el.Replica, failover: failover}}
	}
	calls := t.writeCalls(ctx, c, OpCommit, ws)
	if err := t.run(ctx, c, OpCommit, calls); err != nil {
		// The batch was delivered: a confirmation that failed is sent
		// again until it lands or the lease ends, so that the collectors
		// sharing the Redis agree with what this one committed locally.
		t.retry(ws, calls)
		return err
	}
	return electionAnswers(calls, answers)
}

// ReleaseElections gives up the elections of keys that token holds pending:
// the batch that took them was not delivered. An election it replaced is
// restored (still expired, for the rest of its time). Elections held
// otherwise are left alone; the call is idempotent.
func (t *Tier) ReleaseElections(ctx context.Context, token string, failover time.Duration, keys []digest.Digest) error {
	if len(keys) == 0 {
		return nil
	}
	c, err := t.connected(OpRelease)
	if err != nil {
		return err
	}
	ws := make([]write, len(keys))
	for i, k := range keys {
		ws[i] = write{op: OpRelease, token: token, election: &electionWrite{key: k, failover: failover}}
	}
	calls := t.writeCalls(ctx, c, OpRelease, ws)
	err = t.run(ctx, c, OpRelease, calls)
	// A pending election left behind would stall its cluster on every
	// collector until the lease ends: a failed release is sent again.
	t.retry(ws, calls)
	return err
}

// electionKey is the key of the election k.
func (t *Tier) electionKey(k digest.Digest) string {
	return t.opts.KeyPrefix + electionInfix + "{" + k.String() + "}"
}

const electionInfix = "elect:"

// electionAnswer decodes the election scripts' reply: {state, replica,
// remaining ms}, state 0 live, 1 taken, 2 pending.
func electionAnswer(c *redis.Cmd) (ElectionAnswer, error) {
	vals, err := c.Slice()
	if err != nil {
		return ElectionAnswer{}, err
	}
	if len(vals) != 3 {
		return ElectionAnswer{}, fmt.Errorf("election script answered %d values", len(vals))
	}
	state, ok1 := vals[0].(int64)
	rep, ok2 := vals[1].(string)
	ms, ok3 := vals[2].(int64)
	if !ok1 || !ok2 || !ok3 || state < 0 || state > 2 || (len(rep) != 0 && len(rep) != digest.Size) {
		return ElectionAnswer{}, fmt.Errorf("election script answered %v", vals)
	}
	a := ElectionAnswer{State: ElectionState(state), Remaining: time.Duration(ms) * time.Millisecond}
	if len(rep) == digest.Size {
		a.Replica = digest.FromBytes([digest.Size]byte([]byte(rep)))
		a.HasPrev = a.State == ElectionTaken
	}
	return a, nil
}

// The election scripts. KEYS[1] is the election key. Every time is the
// server's (TIME, in ms). A value is parsed by position: state (1 byte),
// replica (16), token (16), then the time's digits from byte 34, then, in a
// pending value, "|" and the committed value it replaces (digits never hold
// a "|", so the first one after byte 34 is the separator).
const electionLib = `
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(v)
  return string.sub(v, 1, 1), string.sub(v, 2, 17), string.sub(v, 18, 33), tonumber(string.match(v, '^%d+', 34))
end
`

// electScript: ARGV replica, token, lease ms, failover ms. Answers {0,
// replica, remaining ms} for a live committed election; {1, previous replica
// or "", 0} when the token holds it (taken now, or by an earlier try of the
// same call); {2, candidate, 0} for another token's pending election.
var electScript = newScript(electSource)

const electSource = electionLib + `
local rep, tok, lease, failover = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local t = now()
local v = redis.call('GET', KEYS[1])
local prev = ''
if v then
  local state, r, owner, at = parse(v)
  if state == 'p' then
    if owner == tok then
      local old = string.match(v, '|(.*)$', 34)
      return {1, string.sub(old, 2, 17), 0}
    end
    return {2, r, 0}
  end
  if at + failover > t then return {0, r, at + failover - t} end
  prev = v
end
redis.call('SET', KEYS[1], 'p' .. rep .. tok .. t .. '|' .. prev, 'PX', lease)
return {1, string.sub(prev, 2, 17), 0}
`

// confirmScript: ARGV replica, token, failover ms. Commits the token's
// pending election, refreshes a committed one of the same replica, or takes
// a free one committed: each answers {0, replica, failover}. Otherwise it
// answers as electScript about what holds the election.
var confirmScript = newScript(confirmSource)

const confirmSource = electionLib + `
local rep, tok, failover = ARGV[1], ARGV[2], tonumber(ARGV[3])
local t = now()
local v = redis.call('GET', KEYS[1])
if v then
  local state, r, owner, at = parse(v)
  if state == 'p' and owner ~= tok then
    return {2, r, 0}
  end
  if state == 'c' and r ~= rep and at + failover > t then
    return {0, r, at + failover - t}
  end
end
redis.call('SET', KEYS[1], 'c' .. rep .. tok .. t, 'PX', 2 * failover)
return {0, rep, failover}
`

// releaseElectionScript: ARGV token, failover ms. Gives up the token's
// pending election, restoring the committed value it replaced for the rest
// of its time, if any is left. Answers 1 if it gave one up, else 0.
var releaseElectionScript = newScript(releaseElectionSource)

const releaseElectionSource = electionLib + `
local tok, failover = ARGV[1], tonumber(ARGV[2])
local v = redis.call('GET', KEYS[1])
if not v then return 0 end
local state, r, owner = parse(v)
if state ~= 'p' or owner ~= tok then return 0 end
local old = string.match(v, '|(.*)$', 34)
if old ~= '' then
  local _, _, _, at = parse(old)
  local left = at + 2 * failover - now()
  if left > 0 then
    redis.call('SET', KEYS[1], old, 'PX', left)
    return 1
  end
end
redis.call('DEL', KEYS[1])
return 1
`
