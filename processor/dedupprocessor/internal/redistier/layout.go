package redistier

import (
	"strconv"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Key layout, version 3. Every key of a group starts with the group's
// prefix: KeyPrefix, plus "{" + tag + "}" in a Cluster, plus "3:". Then come
//
//   - "h" and a shard's number in hex: a record hash, the records of one
//     digest shard, each a field (the digest's first 11 bytes) valued with a
//     3-byte stamp and the 8-byte id of the claim that holds it (the random
//     half of its token), and the field "" holding, in 10 decimal digits,
//     the second until which the hash is kept (its roll mark);
//   - "c:" and a claim's id: the claim's status key (scripts.go);
//   - "s": the group's shape, a hash of L, p and n (below);
//   - "f": the fence, a key never written (scripts.go says why).
//
// Outside the groups, KeyPrefix + "shape" holds the layout's shape: its
// version and, in a Cluster, the number of hash tags. Nothing else is
// stored, and nothing about a record's content: digests only.
//
// The shape is shared state, never a setting each collector repeats. The
// first collector to use a key prefix writes it; every other one reads it
// and uses it, whatever its own settings (Options.ClusterSlots only sizes a
// layout being created), and one that finds another version does not start.
// What a collector's settings change (its window, its lease) lives in each
// record and claim: a rolling change of them, one collector at a time, does
// not change where a record is or how long it is remembered by the others.
//
// Why hashes: a top-level key costs Redis about 160 bytes of headers,
// dictionary and expiry entries, a field of a small hash (a listpack) its
// bytes and two or three more. A field keeps 88 of the digest's 128 bits.
//
// Why a stamp per record: a field cannot expire on its own (before Redis
// 7.4, and such expiries cost more than the record). A record is held while
// its claim's status key lives (scripts.go): pending for the lease, renewed
// while its batch is downstream, then committed for the committer's window.
// Its stamp is a second by which that status key has surely expired: the
// claim's second plus the claimer's window and three leases, moved on by
// the claim's renewals once its batch has been downstream a lease since
// (writer.go). A commit lands within a lease of its batch's end, when the
// renewals stop, so the record outlives the committed status. A record whose stamp
// has passed is deleted; one whose status key is gone but whose stamp has
// not passed yet is free to claim, and only costs memory until then. So
// each record carries its own window, and collectors with different
// windows share hashes without shortening each other's records.
//
// Rolls: a write whose stamp is past its hash's roll mark rolls the hash
// first: deletes the records whose stamps have passed, and sets the mark,
// and the hash's expiry, to the stamp plus half the writer's window. So a
// hash that is written to is rolled every half window, a record leaves
// Redis within half a window of its stamp, and a hash nobody writes to
// expires, with its records, after its last stamp: every key but the
// shapes expires by itself.
//
// Why shards that split: a hash is scanned to find a field, so it is kept
// short (about recordsPerShard records), and a group's shard count follows
// the records it holds, with no setting: linear hashing. The group's shape
// holds L, p and n: there are 2^L + p shards, and a digest whose 32-bit
// shard hash h (field bytes 8 to 11) has h mod 2^L below p is in shard
// h mod 2^(L+1), else in h mod 2^L. When n, the records the group holds,
// passes recordsPerShard per shard, a claim splits shard p: the records
// whose hash has bit L set move to shard p + 2^L, and p moves on (L grows by
// one when p reaches 2^L). Only Redis knows the shape of a group: each
// script reads it and names the hashes itself, atomically with the split,
// so no collector can look in the wrong hash, however the load grows. More
// load costs memory and splits, never a refused claim.
//
// In a Cluster the tag puts a group's keys in one slot, so one script
// checks a claim's status and its records atomically. A digest's tag is
// one of the shape's tags (Options.ClusterSlots when the layout is created,
// 12 unless set), chosen from its bits, tag i in the middle of the i-th of
// as many equal slot ranges: an even split of the slots over masters (as
// redis-cli makes it) gives each master the same number of tags when their
// count is a multiple of the masters'. A tag is one slot, so records spread
// over as many masters as there are tags, and each tag costs a script call,
// a commit and a status key per batch that touches it
// (BenchmarkClaimCommitTags). Round trips do not grow with it: a batch's
// calls go in one pipeline per master.
const (
	layoutVersion    = 3
	statusInfix      = "c:"
	recordsPerShard  = 32
	defaultTags      = 12
	clusterSlots     = 16384
	maxKeysPerScript = 1000 // bounds the time one script holds the server
	fieldSize        = 11
)

// Shape is the layout every collector sharing a key prefix uses, as stored
// in Redis.
type Shape struct {
	Version int
	Tags    int // hash tags of a Cluster's keys; 0 outside a Cluster
}

type layout struct {
	shape  Shape
	groups []group // one outside a Cluster, one per tag inside
}

// group is the keys of one hash tag: its prefix (KeyPrefix, the tag, the
// version), and the keys its scripts declare.
type group struct {
	prefix string // record hashes are prefix + "h" + shard
	status string // prefix + statusInfix: status keys are status + claim id
	shape  string // prefix + "s"
	fence  string // prefix + "f"
}

// shapeKey is the key holding the layout's shape.
func shapeKey(keyPrefix string) string { return keyPrefix + "shape" }

// newLayout returns the layout of shape under keyPrefix.
func newLayout(keyPrefix string, shape Shape) *layout {
	tagNames := []string{""}
	if shape.Tags > 0 {
		tagNames = clusterHashTags(shape.Tags)
	}
	l := &layout{shape: shape, groups: make([]group, len(tagNames))}
	for i, tag := range tagNames {
		p := keyPrefix
		if tag != "" {
			p += "{" + tag + "}"
		}
		p += strconv.Itoa(layoutVersion) + ":"
		l.groups[i] = group{prefix: p, status: p + statusInfix, shape: p + "s", fence: p + "f"}
	}
	return l
}

func (l *layout) groupOf(d digest.Digest) int {
	// The top 32 bits scaled to [0, groups): uniform, no modulo.
	return int((d.Hi >> 32) * uint64(len(l.groups)) >> 32)
}

// appendField appends d's field: the digest's first fieldSize bytes.
func appendField(dst []byte, d digest.Digest) []byte {
	b := d.Bytes()
	return append(dst, b[:fieldSize]...)
}

// hashName is the name of d's record hash when its group's shape is L =
// level and p = split: the scripts' addressing, for tests and operators.
func (l *layout) hashName(d digest.Digest, level, split uint) string {
	b := d.Bytes()
	h := uint64(b[7])<<24 | uint64(b[8])<<16 | uint64(b[9])<<8 | uint64(b[10]) // the shard hash
	s := h % (1 << level)
	if s < uint64(split) {
		s = h % (1 << (level + 1))
	}
	return l.groups[l.groupOf(d)].prefix + "h" + strconv.FormatUint(s, 16)
}

// statusKey is the status key of token's claim in group g.
func (l *layout) statusKey(g int, token string) string {
	return l.groups[g].status + ClaimID(token)
}

// ClaimID is the part of a claim's token Redis holds and Claim returns for a
// pending holder: its random half.
func ClaimID(token string) string { return token[len(token)/2:] }

// clusterHashTags returns n tags (n <= clusterSlots/4): tag i is the first
// base-36 number whose slot lies in the middle half of the i-th of n equal
// ranges. A test pins them.
func clusterHashTags(n int) []string {
	tags := make([]string, n)
	for left, k := n, uint64(0); left > 0; k++ {
		s := strconv.FormatUint(k, 36)
		slot := int(crc16(s)) % clusterSlots
		i := slot * n / clusterSlots
		lo := i*clusterSlots/n + clusterSlots/n/4
		if tags[i] == "" && slot >= lo && slot < lo+clusterSlots/n/2 {
			tags[i] = s
			left--
		}
	}
	return tags
}

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
