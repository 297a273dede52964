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

// Replica election: which replica of an HA group of agents (a cluster) the
// collectors sharing this Redis deliver.
//
// An election is one key, atomic on one node: KeyPrefix + "elect:{" + the
// hex of the digest of tenant and cluster + "}" (the tag spreads elections
// over a Cluster's masters; hex, so no digest byte forms a tag). Its value
// holds digests, a token and a time in ms by the server's clock (TIME, so
// skewed collectors agree):
//
//	committed: "c" replica token refreshed-at
//	pending:   "p" replica token taken-at "|" the committed value it replaces, if any
//
// A committed election is live until refreshed-at + failover; its key is
// kept one failover longer, so its successor can tell it replaces another.
// A pending one lives for the lease.

// OpElect names an election lookup (Elect) for Options.Observe.
const OpElect = "elect"

// ElectionState is the shared tier's answer for one election.
type ElectionState uint8

const (
	ElectionLive    ElectionState = iota // Replica elected for Remaining more
	ElectionTaken                        // pending under the token; if HasPrev, Replica is the one it replaces
	ElectionPending                      // pending under another token, for the candidate Replica
	ElectionUnknown                      // the call failed, maybe taking it: release it
)

// Election is one election a batch asks about or confirms.
type Election struct {
	Key     digest.Digest // of the tenant and the cluster
	Replica digest.Digest // of the replica label value
}

// ElectionAnswer is the answer for one Election.
type ElectionAnswer struct {
	State     ElectionState
	Replica   digest.Digest
	HasPrev   bool
	Remaining time.Duration
}

// Elect answers which replica of e's cluster is elected, in one round trip. If
// none is live or pending, it takes it for e.Replica, pending under token,
// renewed until CommitElected or ReleaseElections. Retrying with the token is
// safe; after its release, it takes nothing.
func (t *Tier) Elect(ctx context.Context, token string, failover time.Duration, e Election) (ElectionAnswer, error) {
	c, err := t.connected(OpElect)
	if err != nil {
		return ElectionAnswer{State: ElectionUnknown}, err
	}
	key := t.electionKey(e.Key)
	rep := e.Replica.Bytes()
	fo := strconv.FormatInt(failover.Milliseconds(), 10)
	cl := &call{op: OpElect, route: key,
		cmd: redis.NewCmd(ctx, "evalsha", electScript.Hash(), 2, key, t.electionMarker(e.Key, token), string(rep[:]), token, t.leaseArg, fo)}
	if err := t.patiently(ctx, c, []*call{cl}); err != nil {
		return ElectionAnswer{State: ElectionUnknown}, err
	}
	a, err := electionAnswer(cl.cmd)
	if err == nil && a.State == ElectionUnknown {
		err = errors.New("the token was released before its election arrived")
	}
	if err != nil {
		return ElectionAnswer{State: ElectionUnknown}, fmt.Errorf("dedup: redis elect: %w", err)
	}
	if a.State == ElectionTaken {
		t.w.hold(token, []*renewal{{token: token, key: key}}, t.opts.Clock.Now())
	}
	return a, nil
}

// CommitElected confirms a delivered batch's elections es: token's pending ones
// commit, same-replica ones refresh, free ones are taken, each ElectionLive for
// failover; others answer as Elect (all zero on error).
func (t *Tier) CommitElected(ctx context.Context, token string, failover time.Duration, es []Election, answers []ElectionAnswer) error {
	answers = answers[:len(es)]
	clear(answers)
	calls, err := t.settleElections(ctx, OpCommit, token, failover, es)
	if err != nil {
		return err
	}
	for i, cl := range calls {
		if answers[i], err = electionAnswer(cl.cmd); err != nil {
			clear(answers)
			return fmt.Errorf("dedup: redis elect: %w", err)
		}
	}
	return nil
}

// ReleaseElections gives up the elections of es token holds, restoring those
// they replaced, and leaves a marker so a late Elect takes nothing; idempotent.
func (t *Tier) ReleaseElections(ctx context.Context, token string, failover time.Duration, es []Election) error {
	_, err := t.settleElections(ctx, OpRelease, token, failover, es)
	return err
}

// settleElections sends es's commits or releases now; the writer retries what
// fails: peers must learn them, and a pending one stalls its cluster.
func (t *Tier) settleElections(ctx context.Context, op, token string, failover time.Duration, es []Election) ([]*call, error) {
	c, _, err := t.beginSettle(op, token, len(es))
	if c == nil {
		return nil, err
	}
	until := t.opts.Clock.Now().Add(t.opts.Lease)
	ws := make([]write, len(es))
	for i, el := range es {
		ws[i] = write{op: op, token: token, election: &el, failover: failover, until: until}
	}
	return t.send(ctx, c, ws)
}

func (t *Tier) electionKey(k digest.Digest) string {
	return t.opts.KeyPrefix + "elect:{" + k.String() + "}"
}

// electionMarker is the key, in the election's slot, a release of token leaves.
func (t *Tier) electionMarker(k digest.Digest, token string) string {
	return t.electionKey(k) + "r" + token
}

// electionAnswer decodes the election scripts' reply {state, replica,
// remaining ms}.
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
	if !ok1 || !ok2 || !ok3 || state < 0 || state > 3 || (len(rep) != 0 && len(rep) != digest.Size) {
		return ElectionAnswer{}, fmt.Errorf("election script answered %v", vals)
	}
	a := ElectionAnswer{State: ElectionState(state), Remaining: time.Duration(ms) * time.Millisecond}
	if len(rep) == digest.Size {
		a.Replica = digest.FromBytes([digest.Size]byte([]byte(rep)))
		a.HasPrev = a.State == ElectionTaken
	}
	return a, nil
}

// The election scripts; KEYS[1] is the election key. A value is parsed by
// position: the time starts at byte 34; the "|" after it, the replaced value.
const electionLib = `
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function parse(v)
  return string.sub(v, 1, 1), string.sub(v, 2, 17), string.sub(v, 18, 33), tonumber(string.match(v, '^%d+', 34))
end
`

// electScript: KEYS[2] the token's release marker; ARGV replica, token,
// lease ms, failover ms. Answers {0, replica, remaining ms} for a live
// committed election; {1, previous replica or "", 0} when the token holds it
// (taken now, or by an earlier try of the same call); {2, candidate, 0} for
// another token's pending election; {3, "", 0} if the token was released.
var electScript = newScript("elect", electionLib+`
if redis.call('EXISTS', KEYS[2]) == 1 then return {3, '', 0} end
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
`)

// confirmScript: ARGV replica, token, failover ms. Commits the token's
// pending election, refreshes a committed one of the same replica, or takes
// a free one committed: each answers {0, replica, failover}. Otherwise it
// answers as electScript about what holds the election.
var confirmScript = newScript("confirm", electionLib+`
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
`)

// renewElectionScript extends by ARGV[1] ms the lease of the election
// pending under token ARGV[2]: 1, or 0 if it ended.
var renewElectionScript = newScript("renew-election", `
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 1) == 'p' and string.sub(v, 18, 33) == ARGV[2] then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
`)

// releaseElectionScript: KEYS[2] the token's release marker; ARGV token,
// failover ms, lease ms. Leaves the marker for the lease and gives up the
// token's pending election, restoring the committed value it replaced for
// the rest of its time, if any is left. Answers 1 if it gave one up, else 0.
var releaseElectionScript = newScript("release-election", electionLib+`
local tok, failover = ARGV[1], tonumber(ARGV[2])
redis.call('SET', KEYS[2], '1', 'PX', ARGV[3])
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
`)
