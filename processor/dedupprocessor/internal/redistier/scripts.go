package redistier

import "github.com/redis/go-redis/v9"

// scriptSources maps each script's hash to its source, for the reload after
// NOSCRIPT (see withSource).
var scriptSources = map[string]string{}

func newScript(src string) *redis.Script {
	s := redis.NewScript(src)
	scriptSources[s.Hash()] = src
	return s
}

// Each script works on the keys of one group (one Cluster slot), so it runs
// atomically on one node. KEYS[1] is the claim's status key, KEYS[2..] are
// digest keys. Lua sees a missing value as false.

// claimScript claims every digest key that is free. It returns the number
// of keys if it claimed them all (the common case, which then builds no
// per-key answer), else a string with one byte per key: '1' claimed by this
// token, '0' held by a committed claim of another token, '2' held by a
// pending claim of another token (its batch is still on its way
// downstream). A key is free if it is absent, or if it holds a token whose
// status key is gone (a pending claim whose lease ran out, or a released
// one). A key that already holds this token counts as claimed: that is a
// retried round trip of the same claim, whose first reply was lost.
//
// Digest keys are written with the window as TTL (the window runs from the
// first acceptance); whether the claim is alive is decided by its status key,
// which the script creates pending, with the lease as TTL, if it claimed
// anything. Redis does not expire keys while a script runs, so what the
// script reads stays true until it returns.
//
// SET ... NX GET answers nil (false in Lua) for a new key, where a plain
// SET NX answers a status reply that Lua turns into a table per call: the
// GET form costs the server less per key.
//
// ARGV: token, lease ms, window ms, status key prefix of the group.
var claimScript = newScript(`
local tok, window, sp = ARGV[1], ARGV[3], ARGV[4]
local out, live, any = nil, {}, false
for i = 2, #KEYS do
  local won, held = true, '0'
  local owner = redis.call('SET', KEYS[i], tok, 'NX', 'GET', 'PX', window)
  if owner and owner ~= tok then
    local state = live[owner]
    if state == nil then
      state = redis.call('GET', sp .. owner)
      live[owner] = state
    end
    if not state then
      redis.call('SET', KEYS[i], tok, 'PX', window)
    else
      won = false
      if state == 'p' then held = '2' end
    end
  end
  if won then
    any = true
  elseif not out then
    out = {}
    for j = 1, i - 2 do out[j] = '1' end
  end
  if out then out[i - 1] = won and '1' or held end
end
if any then redis.call('SET', KEYS[1], 'p', 'NX', 'PX', ARGV[2]) end
if out then return table.concat(out) end
return #KEYS - 1
`)

// releaseScript deletes the digest keys that still hold the token
// (compare-and-delete) and the status key. Keys taken over by another claim
// keep their new owner.
//
// ARGV: token.
var releaseScript = newScript(`
local tok, n = ARGV[1], 0
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == tok then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
redis.call('DEL', KEYS[1])
return n
`)

// commitScript makes a pending claim hold for the window. It answers 1 if
// the claim is committed (now, or by an earlier try whose reply was lost),
// 0 if it had ended: its lease ran out before the commit, so its digests
// may have been claimed by a copy since. A commit never revives an ended
// claim.
//
// KEYS[1]: the status key. ARGV: window ms.
var commitScript = newScript(`
local s = redis.call('GET', KEYS[1])
if s == 'p' then
  redis.call('SET', KEYS[1], 'c', 'PX', ARGV[1])
  return 1
end
if s == 'c' then return 1 end
return 0
`)

// renewScript extends a pending claim's lease while its batch is
// downstream. It answers 1 if the claim was pending, 0 if it had ended.
//
// KEYS[1]: the status key. ARGV: lease ms.
var renewScript = newScript(`
if redis.call('GET', KEYS[1]) == 'p' then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
`)
