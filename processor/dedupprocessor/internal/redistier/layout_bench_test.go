package redistier

import (
	"context"
	"crypto/rand"
	"math/bits"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/otelcol-dedup/otelcol-dedup/internal/testkit/redistest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// BenchmarkLayout weighs the tier's key layout against a compact one on
// what a remembered record costs Redis: used_memory and CPU per record once
// b.N batches of benchBatch unique records are committed (-benchtime 10000x
// is 10^7 keys), for a 1-hour and a 7-day window.
//
//   - keys: the tier as it is, one string key per record.
//   - hashes: records as fields of small hashes that stay listpacks, one
//     hash per (window-long epoch, digest shard), about 32 records a shard
//     at the end. The field is the digest without its first 2 bytes (the
//     shard has them), the value a 4-byte claim id whose status key is as
//     the tier's. A claim looks in the previous epoch's hash, then sets the
//     field in the current one: a record is remembered for at least the
//     window and at most two. The variants differ in how an epoch's hashes
//     get their expiry (the end of the next epoch): expiry=each gives it
//     with every record set, expiry=once only with a record of a shard this
//     client has not given it yet in this epoch, expiry=none never (the
//     cost of a layout whose old hashes are deleted some other way).
//     expiry=roll keeps one hash per shard, for every epoch: the value
//     carries the claim's epoch, a claim sets the field with HSETNX alone,
//     and the first record of a shard this client claims in an epoch first
//     deletes the shard's fields older than the previous epoch and sets the
//     hash's expiry to three epochs.
//
// The compact layouts are sketches of the claim, not the tier: no look, no
// Cluster, and the epoch taken from the client's clock.
func BenchmarkLayout(b *testing.B) {
	for _, window := range []time.Duration{time.Hour, 7 * 24 * time.Hour} {
		w := "/window=" + window.String()
		b.Run("layout=keys"+w, func(b *testing.B) {
			srv := redistest.Standalone(b)
			tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: window, Timeout: 5 * time.Second})
			runBatches(b, srv.Client(), tierClaimCommit(tr))
		})
		for _, expiry := range []string{"each", "once", "none", "roll"} {
			b.Run("layout=hashes/expiry="+expiry+w, func(b *testing.B) {
				srv := redistest.Standalone(b)
				c := srv.Client()
				h := newHashLayout(window, expiry, max(1, bits.Len(uint(b.N*benchBatch/32))-1))
				runBatches(b, c, func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
					return h.claimCommit(ctx, c, ds, claimed)
				})
			})
		}
	}
}

// BenchmarkLayoutSteady runs the tier's keys and the rolled hashes of
// BenchmarkLayout at a 2-second window for b.N batches (-benchtime 5000x is
// about 8 windows here): Redis CPU per record with expiry and rolls in it,
// and the memory left at the end per record claimed in the last two windows
// (what a steady load keeps: a rolled record goes between one and two
// windows after its claim).
func BenchmarkLayoutSteady(b *testing.B) {
	const window = 2 * time.Second
	for _, layout := range []string{"keys", "roll"} {
		b.Run("layout="+layout, func(b *testing.B) {
			srv := redistest.Standalone(b)
			c := srv.Client()
			var op func(context.Context, []digest.Digest, []bool) error
			if layout == "keys" {
				tr := newTier(b, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "otelcol-dedup:", Window: window, Lease: time.Second, Timeout: 5 * time.Second})
				op = tierClaimCommit(tr)
			} else {
				h := newHashLayout(window, "roll", 15)
				op = func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
					return h.claimCommit(ctx, c, ds, claimed)
				}
			}
			var mu sync.Mutex
			var done []time.Time // when each batch was claimed
			before := usedMemory(b, c)
			runBatches(b, c, func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
				at := time.Now()
				err := op(ctx, ds, claimed)
				mu.Lock()
				done = append(done, at)
				mu.Unlock()
				return err
			})
			recent := 0
			for _, at := range done {
				if time.Since(at) < 2*window {
					recent += benchBatch
				}
			}
			b.ReportMetric(float64(usedMemory(b, c)-before)/float64(recent), "redis-B/recent-record")
		})
	}
}

// tierClaimCommit claims a batch in the tier and commits it at once.
func tierClaimCommit(tr *Tier) func(context.Context, []digest.Digest, []bool) error {
	return func(ctx context.Context, ds []digest.Digest, claimed []bool) error {
		tok := testToken()
		if err := tr.claimBools(ctx, tok, ds, claimed); err != nil {
			return err
		}
		return tr.settle(ctx, OpCommit, tok, ds, false)
	}
}

func newHashLayout(window time.Duration, expiry string, shardBits int) *hashLayout {
	return &hashLayout{prefix: "otelcol-dedup:", window: window, expiry: expiry, shardBits: shardBits,
		given: make([]atomic.Bool, 1<<shardBits)}
}

type hashLayout struct {
	prefix    string
	window    time.Duration
	expiry    string
	shardBits int
	given     []atomic.Bool // the shards this client gave their expiry, or rolled
	epoch     atomic.Int64  // the epoch given is of
}

// hashClaim claims the records of KEYS[2..] (pairs: the current and the
// previous epoch's hash of a record) and ARGV[6..] (their fields) under the
// claim id ARGV[1], and answers one byte per record, '1' claimed. ARGV: id,
// lease ms, expiry of the current epoch's hashes (unix ms), status key
// prefix, one byte per record: '1' if its hash is to be given the expiry.
var hashClaim = redis.NewScript(`
local id, expat, sp, give = ARGV[1], ARGV[3], ARGV[4], ARGV[5]
local live, out, any = {}, {}, false
for i = 2, #KEYS, 2 do
  local cur, f = KEYS[i], ARGV[5 + i / 2]
  local owner = redis.call('HGET', KEYS[i + 1], f)
  local won = false
  if not owner then
    if redis.call('HSETNX', cur, f, id) == 1 then
      won = true
      if string.byte(give, i / 2) == 49 then redis.call('PEXPIREAT', cur, expat, 'NX') end
    else
      owner = redis.call('HGET', cur, f)
    end
  end
  if owner then
    if owner == id then
      won = true
    else
      local state = live[owner]
      if state == nil then
        state = redis.call('GET', sp .. owner) or false
        live[owner] = state
      end
      if not state or state == 'r' then
        redis.call('HSET', cur, f, id)
        won = true
      end
    end
  end
  any = any or won
  out[i / 2] = won and '1' or '0'
end
if any then redis.call('SET', KEYS[1], 'p', 'NX', 'PX', ARGV[2]) end
return table.concat(out)
`)

// claimCommit claims ds in one script call, with the expiry or roll flags
// of the variant, and commits the claim.
func (h *hashLayout) claimCommit(ctx context.Context, c *redis.Client, ds []digest.Digest, claimed []bool) error {
	var id [4]byte
	_, _ = rand.Read(id[:])
	epoch := time.Now().UnixMilli() / h.window.Milliseconds()
	if h.epoch.Swap(epoch) != epoch {
		for i := range h.given {
			h.given[i].Store(false)
		}
	}
	cur := h.prefix + "h" + strconv.FormatInt(epoch, 36) + ":"
	prev := h.prefix + "h" + strconv.FormatInt(epoch-1, 36) + ":"
	status := h.prefix + "s:" + string(id[:])
	keys := make([]string, 0, 1+2*len(ds))
	keys = append(keys, status)
	give := make([]byte, len(ds))
	for i, d := range ds {
		shard := d.Hi >> (64 - h.shardBits)
		give[i] = '0'
		if h.expiry == "each" || h.expiry != "none" && !h.given[shard].Load() {
			give[i] = '1'
		}
		s := strconv.FormatUint(shard, 36)
		if h.expiry == "roll" {
			keys = append(keys, h.prefix+"r:"+s)
		} else {
			keys = append(keys, cur+s, prev+s)
		}
	}
	script := hashClaim
	args := make([]any, 0, 6+len(ds))
	if h.expiry == "roll" {
		script = rollClaim
		args = append(args, string(id[:]), 30000, string([]byte{byte(epoch)}), h.prefix+"s:", string(give), 3*h.window.Milliseconds())
	} else {
		args = append(args, string(id[:]), 30000, strconv.FormatInt((epoch+2)*h.window.Milliseconds(), 10), h.prefix+"s:", string(give))
	}
	for _, d := range ds {
		bs := d.Bytes()
		args = append(args, string(bs[2:]))
	}
	out, err := script.Run(ctx, c, keys, args...).Text()
	if err != nil {
		return err
	}
	for i := range claimed {
		claimed[i] = out[i] == '1'
		if claimed[i] {
			h.given[ds[i].Hi>>(64-h.shardBits)].Store(true)
		}
	}
	return c.Set(ctx, status, "c", 2*h.window).Err()
}

// rollClaim is hashClaim on one hash per shard (KEYS[2..]), the value the
// claim id and the epoch's byte: ARGV[5] gives, per record, '1' if its
// shard is to be rolled (its fields of epochs before the previous one
// deleted, and its expiry set to three epochs) first. ARGV: id, lease ms,
// epoch byte, status key prefix, roll bytes, three epochs in ms, fields.
var rollClaim = redis.NewScript(`
local id, e, sp, roll = ARGV[1], string.byte(ARGV[3]), ARGV[4], ARGV[5]
local v = id .. ARGV[3]
local live, out, any = {}, {}, false
for i = 2, #KEYS do
  local key, f = KEYS[i], ARGV[5 + i]
  if string.byte(roll, i - 1) == 49 then
    local all, old = redis.call('HGETALL', key), {}
    for j = 2, #all, 2 do
      local age = (e - string.byte(all[j], 5)) % 256
      if age > 1 then old[#old + 1] = all[j - 1] end
    end
    if #old > 0 then redis.call('HDEL', key, unpack(old)) end
    redis.call('PEXPIRE', key, ARGV[6])
  end
  local won = redis.call('HSETNX', key, f, v) == 1
  if not won then
    local owner = redis.call('HGET', key, f)
    local age = (e - string.byte(owner, 5)) % 256
    owner = string.sub(owner, 1, 4)
    if owner == id then
      won = true
    else
      local state = false
      if age <= 1 then
        state = live[owner]
        if state == nil then
          state = redis.call('GET', sp .. owner) or false
          live[owner] = state
        end
      end
      if not state or state == 'r' then
        redis.call('HSET', key, f, v)
        won = true
      end
    end
  end
  any = any or won
  out[i - 1] = won and '1' or '0'
end
if any then redis.call('SET', KEYS[1], 'p', 'NX', 'PX', ARGV[2]) end
return table.concat(out)
`)
