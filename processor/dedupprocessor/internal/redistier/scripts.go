package redistier

import "github.com/redis/go-redis/v9"

// Each script works on the keys of one group (one Cluster slot), so it runs
// atomically on one node. KEYS[1] is the claim's status key, KEYS[2..] are
// digest keys. Lua sees a missing value as false.

// claimScript claims every digest key that is free. It returns the number
// of keys if it claimed them all (the common case, which then builds no
// per-key answer), else a string with one byte per key: '1' claimed by this
// token, '0' held by a committed claim of another token, and for a key
// held by a pending claim of another token (its batch is still on its way
// downstream): '4' if that token is younger, '2' if it is older and not
// marked waiting, '3' if it is older and marked (see Pending, PendingYounger
// and PendingOlder). When some key is held by a pending claim, the reply is
// a table instead: that string, then a string of two bytes per key (big
// endian) giving the holder of each pending key as an index into the
// tokens that follow (1 is the first; 0 for a key not pending), then those
// tokens. Tokens compare bytewise (string.byte, never the locale-dependent
// '<' of Lua strings). A key is free if it is absent, or if it holds a
// token whose status key is gone (a pending claim whose lease ran out, or a
// released one). A key that already holds this token counts as claimed:
// that is a retried round trip of the same claim, whose first reply was
// lost.
//
// A recheck names, for the keys a previous call found pending, the token
// that held each (ARGV[5]: two bytes per key as in the reply, 0 for a key
// without one; ARGV[6..]: the tokens). While that token's claim is alive,
// the key is answered from the claim's status alone, without touching the
// key: '0' once it is committed, since a batch commits only after
// delivering every record it claimed or found delivered, this one included
// (the key may have changed hands meanwhile, through a yield of the holder,
// but its record is delivered all the same); pending as above while it is
// pending. A wait then costs the server one status read per holder and
// look, not a write per record. Once the holder's status key is gone, the
// key is claimed as in a first call.
//
// Digest keys are written with the window as TTL (the window runs from the
// first acceptance); whether the claim is alive is decided by its status key,
// which the script creates pending, with the lease as TTL, if it claimed
// anything. Redis does not expire keys while a script runs, so what the
// script reads stays true until it returns.
//
// SET ... NX GET answers nil (false in Lua) for a new key, where a plain
// SET NX answers a status reply that Lua turns into a table per call: the
// GET form costs the server less per key (BENCHMARKS.md, "The shared tier on
// its own").
//
// A claim that meets a pending claim of a younger token is about to wait
// for a younger batch: if its token holds anything in the group, the script
// sets the token's waiting mark (the status key + "w", with the lease as
// TTL), which tells younger claims meeting it to give way. An older holder
// whose token lacks the mark flag (bytes 9 and 10 are not tokenFlag: a
// token of an earlier version, whose batch never sets the mark) is taken as
// marked.
//
// ARGV: token, lease ms, window ms, status key prefix of the group, and for
// a recheck the holders as above.
var claimScript = redis.NewScript(claimSource)

const claimSource = `
local tok, window, sp, hidx = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local out, live, seen, any, younger = nil, {}, {}, false, false
local holders, hnum, hout = nil, {}, nil
local function older(a)
  for i = 1, math.min(#a, #tok) do
    local x, y = string.byte(a, i), string.byte(tok, i)
    if x ~= y then return x < y end
  end
  return #a < #tok
end
local function marked(a)
  if #a ~= 16 or string.byte(a, 9) ~= 213 or string.byte(a, 10) ~= 58 then return true end
  return redis.call('EXISTS', sp .. a .. 'w') == 1
end
local function status(a)
  local state = live[a]
  if state == nil then
    state = redis.call('GET', sp .. a)
    live[a] = state
  end
  return state
end
for i = 2, #KEYS do
  local won, held, owner, state = true, '0', nil, false
  if hidx then
    local h = string.byte(hidx, 2 * i - 3) * 256 + string.byte(hidx, 2 * i - 2)
    if h > 0 then
      owner = ARGV[5 + h]
      state = status(owner)
      if not state then owner = nil end
    end
  end
  if not owner then
    owner = redis.call('SET', KEYS[i], tok, 'NX', 'GET', 'PX', window)
    if owner and owner ~= tok then
      state = status(owner)
      if not state then
        redis.call('SET', KEYS[i], tok, 'PX', window)
        owner = nil
      end
    else
      owner = nil
    end
  end
  if owner then
    won = false
    if state == 'p' then
      held = seen[owner]
      if held == nil then
        if not older(owner) then
          held = '4'
        elseif marked(owner) then
          held = '3'
        else
          held = '2'
        end
        seen[owner] = held
      end
      if held == '4' then younger = true end
      if not hout then
        holders, hout = {}, {}
        for j = 1, i - 2 do hout[j] = '\0\0' end
      end
      local n = hnum[owner]
      if not n then
        holders[#holders + 1] = owner
        n = #holders
        hnum[owner] = n
      end
      hout[i - 1] = string.char(math.floor(n / 256), n % 256)
    end
  end
  if hout and not hout[i - 1] then hout[i - 1] = '\0\0' end
  if won then
    any = true
  elseif not out then
    out = {}
    for j = 1, i - 2 do out[j] = '1' end
  end
  if out then out[i - 1] = won and '1' or held end
end
if any then redis.call('SET', KEYS[1], 'p', 'NX', 'PX', ARGV[2]) end
if younger and (any or redis.call('EXISTS', KEYS[1]) == 1) then
  redis.call('SET', KEYS[1] .. 'w', '1', 'PX', ARGV[2])
end
if hout then
  local reply = {table.concat(out), table.concat(hout)}
  for j = 1, #holders do reply[j + 2] = holders[j] end
  return reply
end
if out then return table.concat(out) end
return #KEYS - 1
`

// releaseScript deletes the digest keys that still hold the token, the
// status key and the waiting mark. Keys taken over by another claim keep
// their new owner.
//
// ARGV: token.
var releaseScript = redis.NewScript(releaseSource)

const releaseSource = `
local tok, n = ARGV[1], 0
for i = 2, #KEYS do
  if redis.call('GET', KEYS[i]) == tok then
    redis.call('DEL', KEYS[i])
    n = n + 1
  end
end
redis.call('DEL', KEYS[1], KEYS[1] .. 'w')
return n
`
