package redistier

import (
	"strconv"
	"strings"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Key layout. Every key starts with the group prefix:
//
//	standalone, Sentinel: KeyPrefix
//	Cluster:              KeyPrefix + "{" + tag + "}"
//
// followed by the digest's 16 bytes (a digest key, value: the claim token),
// "claim:" + token (the claim's status key, value "p" while the claim is
// pending, "c" once committed), or "claim:" + token + "w" (the claim's
// waiting mark, while its batch waits for other claims; see claimScript).
// Nothing else is stored.
//
// In a Cluster the hash tag puts a digest key and the status key that decides
// whether its owner is still alive into the same slot, so one script can
// check both atomically. A digest's tag is one of clusterTags tags, chosen
// from the digest's bits. Each tag sits in the middle of one of clusterTags
// equal slot ranges, so the usual even slot split (redis-cli --cluster create,
// rebalance) gives 3, 4, 6 or 12 masters the same number of tags.
//
// Every tag group costs a script call and a commit command per batch that
// touches it, whatever the number of its digests, so the tag count is a
// trade paid by every batch: more tags spread the keys over more masters,
// and cost more per record, the more so for small batches. 12 tags use at
// most 12 masters, whose capacity bounds the Cluster's dedup load; the
// figures behind the choice are in BENCHMARKS.md ("The shared tier on its
// own"). Each tag's slot holds 1/12 of the keys: move whole slots to
// rebalance.
//
// The tag count cannot follow the Cluster's size: the layout is shared by
// every collector using the same Redis, and changing clusterTags, the tag
// table, the infix or the digest encoding makes old and new instances blind
// to each other's claims for one window.
const (
	clusterTags      = 12
	statusInfix      = "claim:"
	clusterSlots     = 16384
	maxKeysPerScript = 1000 // bounds the time one script holds the server
)

type layout struct {
	// groups holds the key prefix of each group: one group outside a
	// Cluster, clusterTags inside.
	groups []group
}

type group struct {
	prefix       string // KeyPrefix, plus the hash tag in a Cluster
	statusPrefix string // prefix + statusInfix
}

// newLayout returns the layout of tags hash tags (clusterTags in a Cluster),
// or of one untagged group if tags is 0.
func newLayout(keyPrefix string, tags int) layout {
	if tags == 0 {
		return layout{groups: []group{{prefix: keyPrefix, statusPrefix: keyPrefix + statusInfix}}}
	}
	l := layout{groups: make([]group, tags)}
	for i, tag := range clusterHashTags(tags) {
		p := keyPrefix + "{" + tag + "}"
		l.groups[i] = group{prefix: p, statusPrefix: p + statusInfix}
	}
	return l
}

// groupOf returns the index of d's group.
func (l *layout) groupOf(d digest.Digest) int {
	if len(l.groups) == 1 {
		return 0
	}
	// The top 32 bits scaled to [0, groups): uniform, no modulo.
	return int((d.Hi >> 32) * uint64(len(l.groups)) >> 32)
}

func (l *layout) statusKey(g int, token string) string {
	return l.groups[g].statusPrefix + token
}

// digestKey returns the key of d.
func (l *layout) digestKey(d digest.Digest) string {
	b := d.Bytes()
	return l.groups[l.groupOf(d)].prefix + string(b[:])
}

// clusterHashTags returns n short strings, one per equal slot range: tag i
// is the first base-36 number whose slot lies in the middle half of range i,
// away from the boundaries where an even split of the slots over the masters
// may fall. For n = clusterTags the result is fixed (see the layout note
// above); a test pins it.
func clusterHashTags(n int) []string {
	tags := make([]string, n)
	width := clusterSlots / n
	for i := range tags {
		lo := i*clusterSlots/n + width/4
		hi := lo + width/2
		for n := uint64(0); ; n++ {
			s := strconv.FormatUint(n, 36)
			if slot := int(crc16(s)) % clusterSlots; slot >= lo && slot < hi {
				tags[i] = s
				break
			}
		}
	}
	return tags
}

// keySlot is the Cluster slot of key (CLUSTER KEYSLOT), hash tags included.
func keySlot(key string) int {
	if open := strings.IndexByte(key, '{'); open >= 0 {
		if end := strings.IndexByte(key[open+1:], '}'); end > 0 {
			key = key[open+1 : open+1+end]
		}
	}
	return int(crc16(key)) % clusterSlots
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
