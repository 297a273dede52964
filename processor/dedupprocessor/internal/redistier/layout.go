package redistier

import (
	"strconv"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

// Key layout. Every key starts with the group prefix: KeyPrefix, plus
// "{" + tag + "}" in a Cluster. Then come the digest's 16 bytes (a digest
// key, holding the claim token) or "claim:" + token (the claim's status key:
// "p" pending, "c" committed). Nothing else is stored.
//
// In a Cluster the tag puts a digest key and its owner's status key in one
// slot, so one script checks both atomically. A digest's tag is one of
// clusterTags, chosen from its bits, each in the middle of one of
// clusterTags equal slot ranges, so an even split gives 3, 4, 6 or 12
// masters the same number of tags. Each tag costs a script call and a
// commit per batch that touches it: the count trades spread against cost
// per record (BENCHMARKS.md, "The shared tier on its own").
//
// The layout is shared by every collector using the same Redis: changing
// clusterTags, the tag table, the infix or the digest encoding makes old and
// new instances blind to each other's claims for one window.
const (
	clusterTags      = 12
	statusInfix      = "claim:"
	clusterSlots     = 16384
	maxKeysPerScript = 1000 // bounds the time one script holds the server
)

type layout struct {
	groups []group // one outside a Cluster, clusterTags inside
}

type group struct {
	prefix       string // KeyPrefix, plus the hash tag in a Cluster
	statusPrefix string // prefix + statusInfix
}

// newLayout returns the layout of tags hash tags, or one untagged group.
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

func (l *layout) groupOf(d digest.Digest) int {
	// The top 32 bits scaled to [0, groups): uniform, no modulo.
	return int((d.Hi >> 32) * uint64(len(l.groups)) >> 32)
}

func (l *layout) statusKey(g int, token string) string {
	return l.groups[g].statusPrefix + token
}

// clusterHashTags returns n tags: tag i is the first base-36 number whose slot
// lies in the middle half of the i-th of n equal ranges. A test pins them.
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
