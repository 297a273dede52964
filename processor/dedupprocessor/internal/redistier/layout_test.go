package redistier

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

func TestCRC16AndKeySlot(t *testing.T) {
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16 check value = %#x, want 0x31c3", got)
	}
	// Values from the Redis Cluster specification and CLUSTER KEYSLOT.
	if got := keySlot("foo"); got != 12182 {
		t.Errorf("keySlot(foo) = %d, want 12182", got)
	}
	if keySlot("{user1000}.following") != keySlot("{user1000}.followers") {
		t.Error("keys with the same hash tag are in different slots")
	}
	if keySlot("foo{}{bar}") != int(crc16("foo{}{bar}"))%16384 {
		t.Error("an empty hash tag must hash the whole key")
	}
}

// TestClusterTagsArePinned pins the Cluster layout: every collector sharing a
// Redis must derive the same keys, so these tags may never change.
func TestClusterTagsArePinned(t *testing.T) {
	tags := clusterHashTags(defaultTags)
	const want = "18,7,b,19,1q,c,6b,5,d,6c,4,a"
	if got := strings.Join(tags, ","); got != want {
		t.Fatalf("cluster hash tags changed:\n got %s\nwant %s", got, want)
	}
	// The component README lists these slots for operators.
	var slots []string
	for _, tag := range tags {
		slots = append(slots, strconv.Itoa(keySlot("{"+tag+"}")))
	}
	if got, want := strings.Join(slots, ","), "511,1716,3300,4574,6162,7365,9175,9974,11298,13302,14039,15495"; got != want {
		t.Fatalf("tag slots changed:\n got %s\nwant %s", got, want)
	}
	for i, tag := range tags {
		slot := keySlot("{" + tag + "}")
		if lo := i * clusterSlots / defaultTags; slot < lo || slot >= lo+clusterSlots/defaultTags {
			t.Errorf("tag %d (%q) hashes to slot %d, outside its range", i, tag, slot)
		}
	}
	// An even split of the slots over 3, 4, 6 or 12 masters (as redis-cli
	// makes it) gives every master the same number of tags.
	for _, masters := range []int{3, 4, 6, 12} {
		per := make([]int, masters)
		for _, tag := range tags {
			per[keySlot("{"+tag+"}")*masters/clusterSlots]++
		}
		for m, n := range per {
			if n != defaultTags/masters {
				t.Errorf("%d masters: master %d serves %d tags, want %d", masters, m, n, defaultTags/masters)
			}
		}
	}
}

// TestTagsSpreadEvenly: for any tag count, each tag has a slot of its own in
// its range, and the slots of masters split as redis-cli splits them serve
// the same number of tags when the masters' count divides the tags'.
func TestTagsSpreadEvenly(t *testing.T) {
	for _, n := range []int{9, 18, 24, 30, 60, 100, 300, 1000} {
		tags := clusterHashTags(n)
		for i, tag := range tags {
			slot := keySlot("{" + tag + "}")
			if lo := i * clusterSlots / n; slot < lo || slot >= (i+1)*clusterSlots/n {
				t.Errorf("%d tags: tag %d (%q) hashes to slot %d, outside its range", n, i, tag, slot)
			}
		}
		for masters := 3; masters <= n; masters++ {
			if n%masters != 0 {
				continue
			}
			per := make([]int, masters)
			for _, tag := range tags {
				per[masterOf(keySlot("{"+tag+"}"), masters)]++
			}
			for m, got := range per {
				if got != n/masters {
					t.Errorf("%d tags over %d masters: master %d serves %d, want %d", n, masters, m, got, n/masters)
				}
			}
		}
	}
}

// masterOf is the master serving slot in a Cluster of masters created by
// redis-cli --cluster create: master i serves the slots up to
// lround((i+1)*16384/masters - 1).
func masterOf(slot, masters int) int {
	per := float64(clusterSlots) / float64(masters)
	for i := range masters - 1 {
		if float64(slot) < math.Round(float64(i+1)*per-1)+1 {
			return i
		}
	}
	return masters - 1
}

func TestLayout(t *testing.T) {
	d := digest.Digest{Hi: 0xffff_ffff_0000_0001, Lo: 0x8000_0000_0000_0002}

	l := newLayout("p:", Shape{Version: layoutVersion})
	if got, want := string(appendField(nil, d)), "\xff\xff\xff\xff\x00\x00\x00\x01\x80\x00\x00"; got != want {
		t.Errorf("field = %q, want %q", got, want)
	}
	// The shard hash is field bytes 8 to 11: 0x01800000.
	for _, c := range []struct {
		level, split uint
		want         string
	}{
		{0, 0, "p:3:h0"},
		{24, 0, "p:3:h800000"},         // h mod 2^24
		{24, 0x800001, "p:3:h1800000"}, // shard 0x800000 is split: h mod 2^25
		{25, 0, "p:3:h1800000"},
	} {
		if got := l.hashName(d, c.level, c.split); got != c.want {
			t.Errorf("L=%d p=%d: record hash %q, want %q", c.level, c.split, got, c.want)
		}
	}
	if got := l.statusKey(l.groupOf(d), "token-id"); got != "p:3:c:n-id" {
		t.Errorf("standalone status key = %q", got)
	}
	if g := l.groups[0]; g.shape != "p:3:s" || g.fence != "p:3:f" || shapeKey("p:") != "p:shape" {
		t.Errorf("group keys %+v, layout shape %q", g, shapeKey("p:"))
	}

	l = newLayout("p:", Shape{Version: layoutVersion, Tags: defaultTags})
	g := l.groupOf(d)
	if g != defaultTags-1 {
		t.Fatalf("group of a digest with the top 32 bits set = %d, want %d", g, defaultTags-1)
	}
	if g := l.groupOf(digest.Digest{Hi: 0x0000_0000_ffff_ffff}); g != 0 {
		t.Fatalf("group of a digest with the top 32 bits clear = %d, want 0", g)
	}
	tag := clusterHashTags(defaultTags)[defaultTags-1]
	if got, want := l.hashName(d, 0, 0), "p:{"+tag+"}3:h0"; got != want {
		t.Errorf("cluster record hash = %q, want %q", got, want)
	}
	for _, key := range []string{l.hashName(d, 20, 3), l.groups[g].shape, l.groups[g].fence} {
		if keySlot(key) != keySlot(l.statusKey(g, "any-token")) {
			t.Errorf("%q and its group's status key are in different slots", key)
		}
	}
}

// TestShardsSplitAsTheirShapeSays: the scripts name and split record hashes
// as layout.go says (hashName is their twin): with a group grown to
// hundreds of shards, every record is in the hash its group's shape names,
// and no hash holds more than a few times recordsPerShard records.
func TestShardsSplitAsTheirShapeSays(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "split:", Window: testWindow})
	ds := digests(t, "", 20_000)
	for i := 0; i < len(ds); i += 1000 {
		tok := testToken()
		wantClaimed(t, claim(t, tr, tok, ds[i:i+1000]...), slices.Repeat([]bool{true}, 1000)...)
		commit(t, tr, tok, ds[i:i+1000]...)
	}
	st := standaloneStore{srv.Client()}
	shape := srv.Client().HGetAll(context.Background(), "split:3:s").Val()
	shards := len(ds) / recordsPerShard
	if shape["n"] != strconv.Itoa(len(ds)) {
		t.Fatalf("group shape %v: n is not the %d records", shape, len(ds))
	}
	level, _ := strconv.Atoi(shape["L"])
	split, _ := strconv.Atoi(shape["p"])
	if got := 1<<level + split; got < shards || got > shards+2 {
		t.Fatalf("group shape %v: %d shards for %d records, want %d", shape, got, len(ds), shards)
	}
	ctx := context.Background()
	for i, d := range ds {
		if v := srv.Client().HGet(ctx, hashOf(t, st, tr.lay(), d), string(appendField(nil, d))).Val(); len(v) != stampSize+8 {
			t.Fatalf("record %d: %q in the hash its group's shape names, want a stamp and a claim id", i, v)
		}
	}
	for k := range scanValues(t, srv.Client(), "split:3:h*") {
		name, _, _ := strings.Cut(k, "/")
		if n := srv.Client().HLen(ctx, name).Val(); n > 4*recordsPerShard {
			t.Errorf("hash %q holds %d fields, want at most %d", name, n, 4*recordsPerShard)
		}
	}
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
