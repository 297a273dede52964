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
// the record hashes of its digests, ARGV after the scripts' own the
// digests' fields (layout.go). A status key holds "p" while its claim is
// pending, "c" once committed, and "r" for a lease after its release: the
// marker that makes a claim of that token arriving late (past its caller's
// timeout) claim nothing, so it cannot land after its release and stall the
// retry. A record's field holds the byte of the epoch it was claimed in and
// its claim's id; the record is held while that claim's status is "p" or
// "c".

// claimScript claims every free digest: not in its hash, or held by an id
// whose status key is gone (lease ran out, or a window after its commit) or
// released, or by this claim (a retry whose reply was lost). It returns the
// number of digests if it claimed them all, else one byte per digest ('1'
// claimed, '0' held committed, '2' held pending, '3' not tried) and the id
// of the first pending claim met; or "r" if this claim was released. The
// status key, created pending if anything was claimed, gets the lease. With
// ARGV[5] = "1" (a look) it stops at the first pending digest. Redis does
// not expire keys while a script runs.
//
// One read (HMGET) finds both the record and whether its hash is to be
// rolled first (layout.go); a roll keeps a field of the next epoch (a
// server whose clock is behind the one before a failover).
//
// ARGV: id, lease ms, window ms, status key prefix of the group, stop,
// fields.
var claimScript = newScript("claim", `
if redis.call('GET', KEYS[1]) == 'r' then return 'r' end
local id, window, sp, stop = ARGV[1], tonumber(ARGV[3]), ARGV[4], ARGV[5] == '1'
local t = redis.call('TIME')
local epoch = math.floor((tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)) / window)
local e, value = tostring(epoch), string.char(epoch % 256) .. id
local expireAt = (epoch + 2) * window
local out, live, any, blocker = nil, {}, false, ''
local function stale(v)
  local age = (epoch - string.byte(v)) % 256
  return age > 1 and age < 255
end
for i = 2, #KEYS do
  local key, f = KEYS[i], ARGV[4 + i]
  local got = redis.call('HMGET', key, f, '')
  local v = got[1]
  if got[2] ~= e then
    local all, old = redis.call('HGETALL', key), {}
    for j = 1, #all, 2 do
      if all[j] ~= '' and stale(all[j + 1]) then old[#old + 1] = all[j] end
    end
    if #old > 0 then redis.call('HDEL', key, unpack(old)) end
    redis.call('HSET', key, '', e)
    redis.call('PEXPIREAT', key, expireAt)
    if v and stale(v) then v = false end
  end
  local won, s, mine = true, false, false
  if v then
    local owner = string.sub(v, 2)
    if owner == id then
      mine = true
    else
      s = live[owner]
      if s == nil then
        s = redis.call('GET', sp .. owner)
        if s ~= 'p' and s ~= 'c' then s = false end
        live[owner] = s
      end
      won = not s
      if s == 'p' and blocker == '' then blocker = owner end
    end
  end
  if won and not mine then redis.call('HSET', key, f, value) end
  if won then
    any = true
  elseif not out then
    out = {}
    for j = 1, i - 2 do out[j] = '1' end
  end
  if out then out[i - 1] = won and '1' or (s == 'p' and '2' or '0') end
  if stop and s == 'p' then
    for j = i, #KEYS - 1 do out[j] = '3' end
    break
  end
end
if any then redis.call('SET', KEYS[1], 'p', 'NX', 'PX', ARGV[2]) end
if out then return table.concat(out) .. blocker end
return #KEYS - 1
`)

// releaseScript deletes the fields holding id ARGV[1] (and a hash left with
// its roll's epoch alone), leaves the release's marker for ARGV[2] ms, and
// answers how many it deleted. ARGV: id, lease ms, fields.
var releaseScript = newScript("release", `
local id, n = ARGV[1], 0
for i = 2, #KEYS do
  local f = ARGV[1 + i]
  local v = redis.call('HGET', KEYS[i], f)
  if v and string.sub(v, 2) == id then
    redis.call('HDEL', KEYS[i], f)
    n = n + 1
    if redis.call('HLEN', KEYS[i]) == 1 then redis.call('DEL', KEYS[i]) end
  end
end
redis.call('SET', KEYS[1], 'r', 'PX', ARGV[2])
return n
`)

// commitScript makes a pending claim hold for the window. It answers 1 if
// the claim is committed (now or by an earlier try), 0 if it was not
// pending: its lease had ended, or its claim has not arrived (the batch was
// delivered on the local cache's word). Either way the status is set
// committed: the fields still holding its id are delivered records,
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
