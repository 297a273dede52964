package redistier

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// TestShorterWindowForgetsNoLongerRecord: collectors with different windows
// share a key prefix (a rolling change of window). One with a 1 s window
// rolls every hash that holds records of one with a 10 m window (their roll
// marks are set back, so that each of its writes rolls): the rolls delete
// none of the longer window's records, shorten no hash's life, and every
// record committed under the longer window is still held.
func TestShorterWindowForgetsNoLongerRecord(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	long := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "windows:", Window: 10 * time.Minute})
	short := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "windows:", Window: time.Second, Lease: time.Second})

	kept := digests(t, "long", 2000)
	tok := testToken()
	wantClaimed(t, claim(t, long, tok, kept...), slices.Repeat([]bool{true}, len(kept))...)
	commit(t, long, tok, kept...)
	ttls := map[string]time.Duration{}
	for k := range scanValues(t, c, "windows:3:h*") {
		name, _, _ := strings.Cut(k, "/")
		if err := c.HSet(ctx, name, "", "0000000000").Err(); err != nil {
			t.Fatal(err)
		}
		ttls[name] = c.PTTL(ctx, name).Val()
	}
	if len(ttls) < 10 {
		t.Fatalf("%d record hashes, want the records spread over many", len(ttls))
	}

	// Every hash gets writes of the short window, each rolling it.
	fresh := digests(t, "short", 20_000)
	for i := 0; i < len(fresh); i += 1000 {
		tok := testToken()
		wantClaimed(t, claim(t, short, tok, fresh[i:i+1000]...), slices.Repeat([]bool{true}, 1000)...)
		commit(t, short, tok, fresh[i:i+1000]...)
	}
	rolled := 0
	for name, before := range ttls {
		mark := c.HGet(ctx, name, "").Val()
		if mark != "0000000000" {
			rolled++
		}
		if after := c.PTTL(ctx, name).Val(); after < before-time.Minute {
			t.Errorf("hash %q expired in %v before the short window's rolls, in %v after", name, before, after)
		}
	}
	if rolled < len(ttls)/2 {
		t.Fatalf("%d of %d hashes rolled, want most", rolled, len(ttls))
	}
	got := claim(t, short, testToken(), kept...)
	if n := strings.Count(fmt.Sprint(got), "true"); n != 0 {
		t.Fatalf("%d of %d records committed under the long window claimed again after the short window's rolls", n, len(kept))
	}
}

// TestLoadPastAnySizingIsAnswered: a group's hash grown far past what a
// script can unpack in one go (10,000 records, in one hash: a layout that
// never split, or a load that outran the splits) still rolls and splits:
// every claim is answered, the hash's records whose stamps passed are
// deleted, and the live ones stay held while they move to their shards.
func TestLoadPastAnySizingIsAnswered(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "huge:", Window: time.Minute})
	now := c.Time(ctx).Val().Unix()
	stamp := func(at int64) string {
		s := at % (1 << 24)
		return string([]byte{byte(s >> 16), byte(s >> 8), byte(s)})
	}
	// 10,000 live records of a committed claim and 10,000 whose stamps
	// passed, all in shard 0 of a group that holds them (n) but never split.
	const owner = "01234567"
	live, dead := digests(t, "live", 10_000), digests(t, "dead", 10_000)
	fields := []any{"", fmt.Sprintf("%010d", now-1)} // rolled long ago: the next write rolls it
	for _, d := range live {
		fields = append(fields, string(appendField(nil, d)), stamp(now+3600)+owner)
	}
	for _, d := range dead {
		fields = append(fields, string(appendField(nil, d)), stamp(now-60)+owner)
	}
	if err := c.HSet(ctx, "huge:3:h0", fields...).Err(); err != nil {
		t.Fatal(err)
	}
	c.Set(ctx, "huge:3:c:"+owner, "c"+strconv.FormatInt(now, 10), time.Hour)
	c.HSet(ctx, "huge:3:s", "L", 0, "p", 0, "n", 20_000)

	// A claim rolls the hash (10,000 deletions) and splits it.
	got := make([]Answer, 1000)
	if _, err := tr.Claim(ctx, testToken(), digests(t, "new", 1000), got, false); err != nil {
		t.Fatalf("claim into an oversized hash: %v", err)
	}
	if slices.ContainsFunc(got, func(a Answer) bool { return a != Claimed }) {
		t.Fatalf("fresh digests answered %v", got)
	}
	if n := c.HLen(ctx, "huge:3:h0").Val(); n > 10_000 {
		t.Fatalf("shard 0 holds %d fields after the roll, want the dead records gone and the rest split off", n)
	}
	// Every live record is still held, wherever the splits moved it; the
	// dead ones are free.
	for i := 0; i < len(live); i += 1000 {
		got := claim(t, tr, testToken(), live[i:i+1000]...)
		if n := strings.Count(fmt.Sprint(got), "true"); n != 0 {
			t.Fatalf("%d live records claimed again", n)
		}
	}
	wantClaimed(t, claim(t, tr, testToken(), dead[:3]...), true, true, true)
}

// TestClaimFailingPartWayHoldsItsWrites: a claim script that fails after it
// wrote some records (here a key of another type where a record hash
// should be: WRONGTYPE) leaves those records held by its pending claim,
// never free: another claim meets them pending, and the failed claim's
// release (what a refused batch does) frees them.
func TestClaimFailingPartWayHoldsItsWrites(t *testing.T) {
	srv := redistest.Standalone(t)
	c := srv.Client()
	ctx := context.Background()
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "part:", Window: time.Minute})
	// Grow the group to several shards, then break one.
	warm := digests(t, "warm", 500)
	tok := testToken()
	claim(t, tr, tok, warm...)
	commit(t, tr, tok, warm...)
	ds := digests(t, "", 40)
	l := tr.lay()
	st := standaloneStore{c}
	bad := hashOf(t, st, l, ds[30])
	var before []digest.Digest // written before the script reaches the broken hash
	for _, d := range ds {
		if hashOf(t, st, l, d) == bad {
			break
		}
		before = append(before, d)
	}
	if err := c.Del(ctx, bad).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, bad, "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}

	failed := testToken()
	answers := make([]Answer, len(ds))
	_, err := tr.Claim(ctx, failed, ds, answers, false)
	if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("claim into a broken hash: %v, want WRONGTYPE", err)
	}
	tr.w.drop(failed) // not renewed: its collector refuses the batch
	if len(before) < 10 {
		t.Fatalf("%d digests before the broken hash, want many", len(before))
	}
	wantValue(t, st, l.statusKey(0, failed), "p")
	other := make([]Answer, len(before))
	if _, err := tr.Claim(ctx, testToken(), before, other, false); err != nil {
		t.Fatal(err)
	}
	for i, a := range other {
		if a != Pending {
			t.Fatalf("record %d written before the failure answered %v, want Pending (held by the failed claim)", i, a)
		}
	}
	// The fault passes; the refused batch releases its claim.
	if err := c.Del(ctx, bad).Err(); err != nil {
		t.Fatal(err)
	}
	release(t, tr, failed, ds...)
	wantClaimed(t, claim(t, tr, testToken(), before...), slices.Repeat([]bool{true}, len(before))...)
}

// TestClaimHeldWhileDownstreamForWindows: a batch stays downstream for three
// windows while other claims write to (and roll) its records' hashes: its
// records stay held, pending, the whole time (its renewals stamp them
// anew), and once it commits they are delivered records.
func TestClaimHeldWhileDownstreamForWindows(t *testing.T) {
	const window = time.Second
	srv := redistest.Standalone(t)
	var obs observations
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "long:", Window: window, Lease: window, Observe: obs.observe})
	ds := digests(t, "", 300)
	tok := testToken()
	claimDownstream(t, tr, tok, ds...)
	start := time.Now()
	for i := 0; time.Since(start) < 3*window; i++ {
		// Others' records into the same hashes, rolling them as their
		// stamps move on.
		other := testToken()
		fresh := digests(t, strconv.Itoa(i), 300)
		claim(t, tr, other, fresh...)
		commit(t, tr, other, fresh...)
		answers := make([]Answer, len(ds))
		if _, err := tr.Claim(context.Background(), testToken(), ds, answers, false); err != nil {
			t.Fatal(err)
		}
		if n := len(ds) - countAnswers(answers, Pending); n != 0 {
			t.Fatalf("after %v downstream: %d of the batch's records not held pending: %v", time.Since(start).Round(time.Millisecond), n, answers)
		}
		time.Sleep(100 * time.Millisecond) // the other batches' pace
	}
	commit(t, tr, tok, ds...)
	wantClaimed(t, claim(t, tr, testToken(), ds[:2]...), false, false)
	if n := obs.count("renew/lost") + obs.count("commit/lost"); n != 0 {
		t.Fatalf("%d renewals or commits lost", n)
	}
}

func countAnswers(as []Answer, want Answer) int {
	n := 0
	for _, a := range as {
		if a == want {
			n++
		}
	}
	return n
}

// TestHeldAnswersTellTheirAge: a digest held committed is answered with the
// time since its holder's commit, to the second of Redis's clock; the
// other answers' ages are -1.
func TestHeldAnswersTellTheirAge(t *testing.T) {
	srv := redistest.Standalone(t)
	tr := newTier(t, Options{Endpoints: []string{srv.Addr()}, KeyPrefix: "ages:", Window: time.Minute})
	ds := digests(t, "", 3)
	committed, pending := testToken(), testToken()
	claim(t, tr, committed, ds[0])
	commit(t, tr, committed, ds[0])
	claim(t, tr, pending, ds[1])
	time.Sleep(2100 * time.Millisecond) // the copies come two seconds after the original
	answers, ages := make([]Answer, 3), make([]time.Duration, 3)
	if _, err := tr.ClaimAges(context.Background(), testToken(), ds, answers, ages, false); err != nil {
		t.Fatal(err)
	}
	if answers[0] != Held || answers[1] != Pending || answers[2] != Claimed {
		t.Fatalf("answers %v, want held, pending, claimed", answers)
	}
	if ages[0] < 2*time.Second || ages[0] > 3*time.Second || ages[1] != -1 || ages[2] != -1 {
		t.Fatalf("ages %v, want 2 to 3 s for the held digest, -1 for the others", ages)
	}
}
