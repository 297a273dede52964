package redistier

import "github.com/redis/go-redis/v9"

// scriptSources maps each script's hash to its source, for withSource.
var scriptSources = map[string]string{}

func newScript(src string) *redis.Script {
	s := redis.NewScript(src)
	scriptSources[s.Hash()] = src
	return s
}

// Each script works on the keys of one group (one Cluster slot), so it runs
// atomically on one node. KEYS[1] is the claim's status key, KEYS[2..] are
// digest keys.

// claimScript claims every free digest key: absent, holding this token (a
// retry whose reply was lost), or holding a token whose status key is gone
// (lease ran out, or released). It returns the number of keys if it claimed
// them all, else one byte per key: '1' claimed, '0' held by a committed
// claim, '2' held by a pending one. Digest keys get the window as TTL; the
// status key, created pending if anything was claimed, gets the lease.
// Redis does not expire keys while a script runs. SET NX GET costs the
// server less than SET NX, whose status reply Lua turns into a table.
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

// releaseScript deletes the status key and the digest keys that still hold
// the token. ARGV: token.
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
// the claim is committed (now or by an earlier try), 0 if it had ended,
// which it never revives. ARGV: window ms.
var commitScript = newScript(`
local s = redis.call('GET', KEYS[1])
if s == 'p' then
  redis.call('SET', KEYS[1], 'c', 'PX', ARGV[1])
  return 1
end
if s == 'c' then return 1 end
return 0
`)

// renewScript extends a pending claim's lease. It answers 1 if the claim
// was pending, 0 if it had ended. ARGV: lease ms.
var renewScript = newScript(`
if redis.call('GET', KEYS[1]) == 'p' then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
`)
