package redistier

import (
	"strconv"
	"strings"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Key layout, version 2. Every key starts with the group prefix: KeyPrefix,
// plus "{" + tag + "}" in a Cluster, plus "2:". Then come either a record
// hash, "<shards>:<shard>" in base 36: the records of one digest shard, each
// a field valued with the byte of the epoch it was claimed in and its
// claim's id (the random half of its token), and the field "" holding the
// epoch the hash was last rolled in; or a claim's status key, "c:" + its id
// (scripts.go). Nothing else is stored.
//
// Why hashes: a top-level key costs Redis about 160 bytes of headers,
// dictionary and expiry entries, a field of a small hash (a listpack) its
// bytes and two or three more. A field is the digest without the bytes the
// shard is taken from and one more (11 bytes: with the shard a record keeps
// at least 88 of the digest's 128 bits, more as shards grow), its value 9
// bytes. Sized so that a shard takes about recordsPerShard records a
// window, a hash is short to scan and stays under Redis's
// hash-max-listpack-entries (512 by default); a bigger one still works, at
// about a top-level key's cost per record.
//
// Why epochs: a field cannot expire on its own (before Redis 7.4, and such
// expiries cost more than the record), and a whole hash expiring would
// forget records younger than a window. An epoch is one window of the
// server's clock (TIME, so skewed collectors agree). The first claim to
// read a hash in an epoch rolls it: it deletes the records of epochs before
// the previous one and sets the hash to expire when the next epoch ends. So
// a record is remembered from its claim until its status key expires, a
// window after its commit, as it would be with a key of its own, and leaves
// Redis with the first roll from the second epoch after its own, or with
// its hash: Redis holds between one and two windows of records, and a
// window more in a hash not rolled yet this epoch.
//
// In a Cluster the tag puts a claim's status key and the hashes of its
// records in one slot, so one script checks both atomically. A digest's tag
// is one of Options.ClusterSlots tags (12 unless set), chosen from its bits,
// tag i in the middle of the i-th of as many equal slot ranges: an even
// split of the slots over masters (as redis-cli makes it) gives each master
// the same number of tags when their count is a multiple of the masters'.
// A tag is one slot, so records spread over as many masters as there are
// tags, and each tag costs a script call, a commit and a status key per
// batch that touches it: the count trades spread against cost per record
// (BenchmarkClaimCommitTags). Round trips do not grow with it:
// a batch's calls go in one pipeline per master.
//
// The layout is shared by every collector using the same Redis: the shard
// count (from Options.Capacity) is in the hash's name, so instances sized
// differently are blind to each other's claims rather than wrong; so are
// instances of another layout version.
const (
	layoutVersion    = "2:"
	statusInfix      = "c:"
	recordsPerShard  = 32
	defaultTags      = 12
	clusterSlots     = 16384
	maxKeysPerScript = 1000 // bounds the time one script holds the server
	fieldSize        = 11
)

type layout struct {
	groups []group // one outside a Cluster, one per tag inside
	shards uint64  // record hashes per group
}

// group is the keys of one hash tag: KeyPrefix, the tag, the version, then
// the shard count and ":" (hashPrefix) or statusInfix (statusPrefix).
type group struct{ hashPrefix, statusPrefix string }

// newLayout returns the layout of tags hash tags, or one untagged group, for
// capacity records a window.
func newLayout(keyPrefix string, tags, capacity int) layout {
	tagNames := []string{""}
	if tags > 0 {
		tagNames = clusterHashTags(tags)
	}
	l := layout{groups: make([]group, len(tagNames))}
	l.shards = uint64(max(1, (capacity+len(l.groups)*recordsPerShard-1)/(len(l.groups)*recordsPerShard)))
	for i, tag := range tagNames {
		p := keyPrefix
		if tag != "" {
			p += "{" + tag + "}"
		}
		p += layoutVersion
		l.groups[i] = group{hashPrefix: p + strconv.FormatUint(l.shards, 36) + ":", statusPrefix: p + statusInfix}
	}
	return l
}

func (l *layout) groupOf(d digest.Digest) int {
	// The top 32 bits scaled to [0, groups): uniform, no modulo.
	return int((d.Hi >> 32) * uint64(len(l.groups)) >> 32)
}

func (l *layout) shardOf(d digest.Digest) uint64 { return (d.Lo >> 32) * l.shards >> 32 }

// appendHash appends the name of d's record hash.
func (l *layout) appendHash(dst []byte, d digest.Digest) []byte {
	dst = append(dst, l.groups[l.groupOf(d)].hashPrefix...)
	return strconv.AppendUint(dst, l.shardOf(d), 36)
}

// appendField appends d's field: the digest's bytes but the four the shard
// is taken from and one more.
func appendField(dst []byte, d digest.Digest) []byte {
	b := d.Bytes()
	return append(append(dst, b[:8]...), b[13:]...)
}

// statusKey is the status key of token's claim in group g.
func (l *layout) statusKey(g int, token string) string {
	return l.groups[g].statusPrefix + ClaimID(token)
}

// isStatusKey reports whether key is the status key of token's claim in group g.
func (l *layout) isStatusKey(key string, g int, token string) bool {
	id, ok := strings.CutPrefix(key, l.groups[g].statusPrefix)
	return ok && id == ClaimID(token)
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
