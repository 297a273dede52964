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

// The claim scripts work on the keys of one group (one Cluster slot), so each
// runs atomically on one node. KEYS are the claim's status key, the group's
// shape and its fence; ARGV ends with the fields of the digests, packed into
// one argument (fieldSize bytes each): a call costs the client and Redis a
// few arguments whatever its size.
//
// A status key holds "p" while its claim is pending (for the lease, renewed
// while the batch is downstream), "c" and the second of its commit once
// committed (for the committer's window), and "r" for a lease after its
// release: the marker that makes a claim of that token arriving late (past
// its caller's timeout) claim nothing, so it cannot land after its release
// and stall the retry. A record's field holds its stamp and its claim's id;
// the record is held while that claim's status is "p" or "c" (layout.go).
//
// The scripts name the record hashes themselves, from the group's shape,
// which only Redis knows: so the hashes are not among the declared KEYS. In
// a Cluster, a slot being migrated may have some of its keys moved and
// others not; a script that ran then could read a hash as empty that has
// moved. The fence makes that impossible: it is declared and never written,
// so every call declares a missing key, and Redis answers TRYAGAIN (or ASK,
// then TRYAGAIN) while the group's slot migrates, whatever has moved, and
// runs the script only on the node that holds the whole slot.
//
// A script that fails part-way keeps what it wrote: Redis does not roll
// back. (Redis refuses a script's first write for memory, not a later one;
// a corrupt shape or an ACL can stop it after a write.) So each writes its
// claim's status first: a field written before the failure is held by a
// pending claim, never free, and the caller settles the claim like any
// other (the release deletes it, the commit makes it a delivered record).

// claimLib is what the claim, release and renew scripts share: the shape,
// the hash of a field, and for writers the stamp, the roll and the split.
// now, stamp and value are set by stamping(window ms, lease ms).
const claimLib = `
local sub, byte, fmt = string.sub, string.byte, string.format
local gp = sub(KEYS[2], 1, -2)
local shape = redis.call('HMGET', KEYS[2], 'L', 'p', 'n')
local L, p, n = tonumber(shape[1]) or 0, tonumber(shape[2]) or 0, tonumber(shape[3]) or 0
local low = 2 ^ L
local function hashOf(f)
  local a, b, c, d = byte(f, 8, 11)
  local h = ((a * 256 + b) * 256 + c) * 256 + d
  local s = h % low
  if s < p then s = h % (2 * low) end
  return gp .. 'h' .. fmt('%x', s)
end
local now, now24, expire, need, value, upto
local function stamping(windowMs, leaseMs, id)
  now = tonumber(redis.call('TIME')[1])
  now24 = now % 16777216
  local w = math.ceil(tonumber(windowMs) / 1000)
  expire = now + w + 3 * math.ceil(tonumber(leaseMs) / 1000) + 1
  need = fmt('%010d', expire)
  upto = fmt('%010d', expire + math.ceil(w / 2))
  local s = expire % 16777216
  value = string.char(math.floor(s / 65536), math.floor(s / 256) % 256, s % 256) .. id
end
local function chunked(cmd, key, list)
  for j = 1, #list, 1000 do
    redis.call(cmd, key, unpack(list, j, math.min(j + 999, #list)))
  end
end
local function roll(key)
  local meta = redis.call('HGET', key, '')
  if meta and meta >= need then return 0 end
  local all, old = redis.call('HGETALL', key), {}
  for j = 1, #all, 2 do
    if all[j] ~= '' then
      local a, b, c = byte(all[j + 1], 1, 3)
      if (now24 - (a * 65536 + b * 256 + c)) % 16777216 < 8388608 then old[#old + 1] = all[j] end
    end
  end
  chunked('HDEL', key, old)
  redis.call('HSET', key, '', upto)
  local keep, ttl = (tonumber(upto) + 1) * 1000, redis.call('PTTL', key)
  if ttl < 0 or ttl < keep - now * 1000 then redis.call('PEXPIREAT', key, keep) end
  return #old
end
local function split()
  local old, new = gp .. 'h' .. fmt('%x', p), gp .. 'h' .. fmt('%x', p + low)
  local fields, gone, stay = redis.call('HKEYS', old), {}, {}
  for i = 1, #fields do
    local f = fields[i]
    local a, b, c, d = byte(f, 8, 11)
    if a and math.floor((((a * 256 + b) * 256 + c) * 256 + d) / low) % 2 == 1 then
      gone[#gone + 1] = f
    elseif a then
      stay[#stay + 1] = f
    end
  end
  if #gone > 0 then
    if #fields <= 512 and redis.pcall('COPY', old, new) == 1 then
      chunked('HDEL', new, stay)
    else
      -- A hashtable (past the listpack limit) is rewritten, so that both
      -- halves are listpacks again; so is a new shard that exists already,
      -- or a server without COPY (before 6.2).
      local all, kept, moved = redis.call('HGETALL', old), {}, {}
      for j = 1, #all, 2 do
        local a, b, c, d = byte(all[j], 8, 11)
        local dst = kept
        if a and math.floor((((a * 256 + b) * 256 + c) * 256 + d) / low) % 2 == 1 then dst = moved end
        if all[j] == '' then moved[#moved + 1], moved[#moved + 2] = '', all[j + 1] end
        dst[#dst + 1], dst[#dst + 2] = all[j], all[j + 1]
      end
      local ttl = redis.call('PTTL', old)
      redis.call('DEL', old)
      chunked('HSET', old, kept)
      chunked('HSET', new, moved)
      if ttl > 0 then
        redis.call('PEXPIRE', old, ttl)
        redis.call('PEXPIRE', new, ttl)
      end
      gone = {}
    end
    chunked('HDEL', old, gone)
  end
  p = p + 1
  if p == low then L, p, low = L + 1, 0, 2 * low end
end
local function grow(added, removed)
  if added == removed then return end
  n = n + added - removed
  redis.call('HINCRBY', KEYS[2], 'n', added - removed)
  local splits = 0
  while n > ` + recordsPerShardLua + ` * (low + p) and splits <= added / ` + recordsPerShardLua + ` + 1 do
    split()
    splits = splits + 1
  end
  if splits > 0 then redis.call('HSET', KEYS[2], 'L', L, 'p', p) end
end
`

// recordsPerShardLua is recordsPerShard in the scripts.
const recordsPerShardLua = "32"

// claimScript claims every free digest: not in its hash, or held by an id
// whose status key is gone (lease ran out, or a window after its commit) or
// released, or by this claim (a retry whose reply was lost). It answers the
// number of digests if it claimed them all, else {one byte per digest ('1'
// claimed, '0' held committed, '2' held pending, '3' not tried), the id of
// the first pending claim met or "", for each digest held committed the
// seconds since its holder's commit in 3 bytes}; or "r" if this claim was
// released. The status key, pending, gets the lease, and is deleted again if
// the claim claimed nothing. With stop = "1" (a recheck) it stops at the first
// pending digest. Redis does not expire keys while a script runs.
//
// ARGV: id, lease ms, window ms, stop, fields.
var claimScript = newScript("claim", claimLib+`
local status = redis.call('GET', KEYS[1])
if status == 'r' then return 'r' end
local id, stop, fields = ARGV[1], ARGV[4] == '1', ARGV[5]
if not status then redis.call('SET', KEYS[1], 'p', 'PX', ARGV[2]) end
stamping(ARGV[3], ARGV[2], id)
local count = #fields / 11
local out, live, ages, blocker, any, added, removed = nil, {}, {}, '', false, 0, 0
for i = 1, count do
  local f = sub(fields, i * 11 - 10, i * 11)
  local key = hashOf(f)
  local won, s = true, false
  if redis.call('HSETNX', key, f, value) == 1 then
    added = added + 1
  else
    local owner = sub(redis.call('HGET', key, f), 4)
    if owner ~= id then
      s = live[owner]
      if s == nil then
        s = redis.call('GET', gp .. 'c:' .. owner)
        if s ~= 'p' and not (s and byte(s) == 99) then s = false end
        live[owner] = s
      end
      won = not s
      if s == 'p' and blocker == '' then blocker = owner end
    end
    if won then redis.call('HSET', key, f, value) end
  end
  if won then
    any = true
    removed = removed + roll(key)
  else
    if not out then
      out = {}
      for j = 1, i - 1 do out[j] = '1' end
    end
    if s ~= 'p' then
      local age = math.min(math.max(now - (tonumber(sub(s, 2)) or now), 0), 16777215)
      ages[#ages + 1] = string.char(math.floor(age / 65536), math.floor(age / 256) % 256, age % 256)
    end
  end
  if out then out[i] = won and '1' or (s == 'p' and '2' or '0') end
  if stop and s == 'p' then
    for j = i + 1, count do out[j] = '3' end
    break
  end
end
if not any and not status then redis.call('DEL', KEYS[1]) end
grow(added, removed)
if out then return {table.concat(out), blocker, table.concat(ages)} end
return count
`)

// releaseScript deletes the fields holding id ARGV[1] (and a hash left with
// its roll mark alone), leaves the release's marker for ARGV[2] ms, and
// answers how many it deleted. ARGV: id, lease ms, fields.
var releaseScript = newScript("release", claimLib+`
local id, fields, gone = ARGV[1], ARGV[3], 0
for i = 1, #fields / 11 do
  local f = sub(fields, i * 11 - 10, i * 11)
  local key = hashOf(f)
  local v = redis.call('HGET', key, f)
  if v and sub(v, 4) == id then
    redis.call('HDEL', key, f)
    gone = gone + 1
    if redis.call('HLEN', key) == 1 and redis.call('HEXISTS', key, '') == 1 then redis.call('DEL', key) end
  end
end
redis.call('SET', KEYS[1], 'r', 'PX', ARGV[2])
grow(0, gone)
return gone
`)

// commitScript makes a pending claim hold for the window. It answers 1 if
// the claim is committed (now or by an earlier try), 0 if it was not
// pending: its lease had ended, or its claim has not arrived (the batch was
// delivered on the local cache's word). Either way the status is set
// committed, with the second of the commit: the fields still holding its id
// are delivered records, and a late claim of the token claims nothing
// pending. A released claim is never revived. ARGV: window ms.
var commitScript = newScript("commit", `
local s = redis.call('GET', KEYS[1])
if s and string.byte(s) == 99 then return 1 end
if s == 'r' then return 0 end
redis.call('SET', KEYS[1], 'c' .. redis.call('TIME')[1], 'PX', ARGV[1])
if s == 'p' then return 1 end
return 0
`)

// renewScript extends by ARGV[1] ms the lease of a pending claim: 1, or 0 if
// it ended. With fields (ARGV[4]), it also stamps anew the records the claim
// holds among them, for ARGV[3] ms of window from now, so that a batch
// downstream for longer than its stamps foresaw keeps its records.
// ARGV: lease ms, id, window ms, fields or "".
var renewScript = newScript("renew", claimLib+`
if redis.call('GET', KEYS[1]) ~= 'p' then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
local id, fields = ARGV[2], ARGV[4]
if fields == '' then return 1 end
stamping(ARGV[3], ARGV[1], id)
local removed = 0
for i = 1, #fields / 11 do
  local f = sub(fields, i * 11 - 10, i * 11)
  local key = hashOf(f)
  local v = redis.call('HGET', key, f)
  if v and sub(v, 4) == id then
    redis.call('HSET', key, f, value)
    removed = removed + roll(key)
  end
end
grow(0, removed)
return 1
`)

// shapeScript returns the layout's shape {version, tags} from KEYS[1],
// writing ARGV's (version, tags) first if there is none.
var shapeScript = newScript("shape", `
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'version', ARGV[1], 'tags', ARGV[2])
end
return redis.call('HMGET', KEYS[1], 'version', 'tags')
`)
