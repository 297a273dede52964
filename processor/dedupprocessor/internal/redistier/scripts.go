package redistier

import "github.com/redis/go-redis/v9"

// Each script's source by hash (for withSource), and hash by name.
var scriptSources, scriptHashes = map[string]string{}, map[string]string{}

// ScriptHash returns the SHA1 of a script by the name newScript gave it, for
// fault-injecting tests.
func ScriptHash(name string) string { return scriptHashes[name] }

func newScript(name, src string) *redis.Script {
	s := redis.NewScript(src)
	scriptSources[s.Hash()], scriptHashes[name] = src, s.Hash()
	return s
}

// Each script works on the keys of one group (one Cluster slot), so it runs
// atomically on one node. KEYS[1] is the claim's status key, KEYS[2..] are
// digest keys. A status key holds "p" while its claim is pending, "c" once
// committed, and "r" for a lease after its release: the marker that makes a
// claim of that token arriving late (past its caller's timeout) claim
// nothing, so it cannot land after its release and stall the retry.

// claimScript claims every free digest key: absent, holding this token (a
// retry whose reply was lost), or holding a token whose status key is gone
// (lease ran out) or released. It returns the number of keys if it claimed
// them all, else one byte per key ('1' claimed, '0' held committed, '2'
// held pending, '3' not tried) and the token of the first pending claim
// met; or "r" if this token was released. Digest keys get the window as
// TTL; the status key, created pending if anything was claimed, the lease.
// With ARGV[5] = "1" (a look) it stops at the first pending key. Redis does
// not expire keys while a script runs. SET NX GET costs the server less
// than SET NX, whose status reply Lua turns into a table. ARGV: token, lease
// ms, window ms, status key prefix of the group, stop.
var claimScript = newScript("claim", `
if redis.call('GET', KEYS[1]) == 'r' then return 'r' end
local tok, window, sp, stop = ARGV[1], ARGV[3], ARGV[4], ARGV[5] == '1'
local out, live, any, blocker = nil, {}, false, ''
for i = 2, #KEYS do
  local won, held = true, '0'
  local owner = redis.call('SET', KEYS[i], tok, 'NX', 'GET', 'PX', window)
  if owner and owner ~= tok then
    local state = live[owner]
    if state == nil then
      state = redis.call('GET', sp .. owner) or false
      live[owner] = state
    end
    if not state or state == 'r' then
      redis.call('SET', KEYS[i], tok, 'PX', window)
    else
      won = false
      if state == 'p' then
        held = '2'
        if blocker == '' then blocker = owner end
      end
    end
  end
  if won then
    any = true
  elseif not out then
    out = {}
    for j = 1, i - 2 do out[j] = '1' end
  end
  if out then out[i - 1] = won and '1' or held end
  if stop and held == '2' and not won then
    for j = i, #KEYS - 1 do out[j] = '3' end
    break
  end
end
if any then redis.call('SET', KEYS[1], 'p', 'NX', 'PX', ARGV[2]) end
if out then return table.concat(out) .. blocker end
return #KEYS - 1
`)

// releaseScript deletes the digest keys holding token ARGV[1], leaves the
// release's marker for ARGV[2] ms, and answers how many it deleted.
var releaseScript = newScript("release", `
local tok, n = ARGV[1], 0
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == tok then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
redis.call('SET', KEYS[1], 'r', 'PX', ARGV[2])
return n
`)

// commitScript makes a pending claim hold for the window. It answers 1 if
// the claim is committed (now or by an earlier try), 0 if it was not
// pending: its lease had ended, or its claim has not arrived (the batch was
// delivered on the local cache's word). Either way the status is set
// committed: the digest keys still holding the token are delivered records,
// and a late claim of the token claims nothing pending. A released claim is
// never revived. ARGV: window ms.
var commitScript = newScript("commit", `
local s = redis.call('GET', KEYS[1])
if s == 'c' then return 1 end
if s == 'r' then return 0 end
redis.call('SET', KEYS[1], 'c', 'PX', ARGV[1])
if s == 'p' then return 1 end
return 0
`)

// renewScript extends by ARGV[1] ms the lease of a pending claim (KEYS[1] its
// status key) or election pending under token ARGV[2]: 1, or 0 if it ended.
var renewScript = newScript("renew", `
local v = redis.call('GET', KEYS[1])
if v == 'p' or (ARGV[2] ~= '' and v and string.sub(v, 1, 1) == 'p' and string.sub(v, 18, 33) == ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  return 1
end
return 0
`)
