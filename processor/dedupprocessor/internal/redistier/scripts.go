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
// and PendingOlder). Tokens compare bytewise (string.byte, never the
// locale-dependent '<' of Lua strings). A key is free if it is absent, or
// if it holds a token whose status key is gone (a pending claim whose lease
// ran out, or a released one). A key that already holds this token counts
// as claimed: that is a retried round trip of the same claim, whose first
// reply was lost.
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
// ARGV: token, lease ms, window ms, status key prefix of the group.
var claimScript = redis.NewScript(claimSource)

const claimSource = `
local tok, window, sp = ARGV[1], ARGV[3], ARGV[4]
local out, live, seen, any, younger = nil, {}, {}, false, false
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
for i = 2, #KEYS do
  local won = true
  local owner = redis.call('SET', KEYS[i], tok, 'NX', 'GET', 'PX', window)
  local held = '0'
  if owner and owner ~= tok then
    local state = live[owner]
    if state == nil then
      state = redis.call('GET', sp .. owner)
      live[owner] = state
    end
    if state then
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
      end
    else
      redis.call('SET', KEYS[i], tok, 'PX', window)
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
if younger and (any or redis.call('EXISTS', KEYS[1]) == 1) then
  redis.call('SET', KEYS[1] .. 'w', '1', 'PX', ARGV[2])
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
