package faultproxy

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/testkit/redistest"
)

// waitTimeout bounds every wait for a condition in these tests.
const waitTimeout = 10 * time.Second

// newClient returns a go-redis client of one connection that never retries,
// so that each call is one attempt on one connection, with timeout as its
// read and write timeout.
func newClient(t *testing.T, addr string, timeout time.Duration) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                     addr,
		DialTimeout:              5 * time.Second,
		ReadTimeout:              timeout,
		WriteTimeout:             timeout,
		MaxRetries:               -1,
		PoolSize:                 1,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// encode renders a command as a RESP array of bulk strings.
func encode(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.SetDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	return c
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

// get returns the value of key as Redis itself holds it, "" if none.
func get(t *testing.T, s *redistest.Server, key string) string {
	t.Helper()
	v, err := s.Client().Get(context.Background(), key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatal(err)
	}
	return v
}

func TestCommandScript(t *testing.T) {
	// SHA1 of "return 1", as SCRIPT LOAD reports it.
	const sha = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"
	for _, c := range []Command{
		{Args: []string{"eval", "return 1", "0"}},
		{Args: []string{"EVALSHA", strings.ToUpper(sha), "0"}},
		{Args: []string{"EVALSHA_RO", sha, "0"}},
	} {
		if got := c.Script(); got != sha {
			t.Errorf("%q.Script() = %q, want %q", c.Args, got, sha)
		}
		if !Script(strings.ToUpper(sha))(c) {
			t.Errorf("Script(sha) does not match %q", c.Args)
		}
	}
	if got := (Command{Args: []string{"GET", "k"}}).Script(); got != "" {
		t.Errorf("GET's Script() = %q, want none", got)
	}
	if !Name("get", "SET")(Command{Args: []string{"set", "k", "v"}}) || Name("GET")(Command{Args: []string{"SET"}}) {
		t.Error("Name does not match by name, in any case")
	}
}

func TestPassThrough(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	c := newClient(t, p.Addr(), 5*time.Second)

	big := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB, many reads and writes
	if err := c.Set(ctx, "big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "big").Result(); err != nil || v != big {
		t.Fatalf("GET big: %d bytes, %v; want %d bytes", len(v), err, len(big))
	}

	cmds, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for range 100 {
			pipe.Incr(ctx, "n")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, cmd := range cmds {
		if v := cmd.(*redis.IntCmd).Val(); v != int64(i+1) {
			t.Fatalf("INCR %d of the pipeline = %d, want %d", i+1, v, i+1)
		}
	}

	// The first Run sends EVALSHA, gets NOSCRIPT and sends EVAL.
	script := redis.NewScript("return ARGV[1]")
	for range 2 {
		if v, err := script.Run(ctx, c, nil, "x").Text(); err != nil || v != "x" {
			t.Fatalf("script = %q, %v", v, err)
		}
	}
	// Every command was answered, the NOSCRIPT error included.
	want := map[string]int{"SET": 1, "GET": 1, "INCR": 100, "EVALSHA": 2, "EVAL": 1}
	for name, n := range want {
		if p.Count(name) != n || p.Answered(strings.ToLower(name)) != n {
			t.Errorf("%s sent %d times, answered %d; want %d", name, p.Count(name), p.Answered(name), n)
		}
	}
	sha := strings.ToUpper(script.Hash())
	if p.ScriptCount(sha) != 3 || p.ScriptAnswered(sha) != 3 {
		t.Errorf("script sent %d times, answered %d; want 3", p.ScriptCount(sha), p.ScriptAnswered(sha))
	}
}

// TestRepliesOfEveryType: replies of every RESP2 and RESP3 type, pushes and
// attributes included, pass unchanged and pair with their commands: a cut
// after the last command's reply delivers exactly Redis's answer to the
// commands before it.
func TestRepliesOfEveryType(t *testing.T) {
	s := redistest.Standalone(t) // with DEBUG enabled
	p := New(t, s.Addr())
	var pipeline []byte
	for _, proto := range []string{"2", "3"} {
		pipeline = append(pipeline, encode("HELLO", proto)...)
		for _, typ := range []string{"string", "integer", "double", "bignum", "null", "array", "set", "map",
			"attrib", "push", "verbatim", "true", "false"} {
			pipeline = append(pipeline, encode("DEBUG", "PROTOCOL", typ)...)
		}
	}
	// Inline commands; Redis answers no empty line.
	pipeline = append(pipeline, "PING\r\n\r\nECHO inline\r\n"...)
	pipeline = append(pipeline, encode("ECHO", "end")...)
	const endReply = "$3\r\nend\r\n"

	direct := dial(t, s.Addr())
	write(t, direct, pipeline)
	var want []byte
	for !strings.HasSuffix(string(want), endReply) {
		buf := make([]byte, 4096)
		n, err := direct.Read(buf)
		if err != nil {
			t.Fatalf("reading Redis's replies: %v after %q", err, want)
		}
		want = append(want, buf[:n]...)
	}

	p.Add(&Rule{Match: func(c Command) bool { return c.Name() == "ECHO" && c.Args[1] == "end" }, Fault: CutAfter()})
	proxied := dial(t, p.Addr())
	write(t, proxied, pipeline)
	got, err := io.ReadAll(proxied)
	if err != nil {
		t.Fatal(err)
	}
	// HELLO reports the connection's id, which differs.
	id := regexp.MustCompile(`\$2\r\nid\r\n:\d+\r\n`)
	wantText := id.ReplaceAllString(strings.TrimSuffix(string(want), endReply), "id")
	if gotText := id.ReplaceAllString(string(got), "id"); gotText != wantText {
		t.Fatalf("through the proxy:\n%q\nwant Redis's own replies but the last:\n%q", gotText, wantText)
	}
	if p.Count("DEBUG") != 26 || p.Count("HELLO") != 2 || p.Count("PING") != 1 || p.Count("ECHO") != 2 {
		t.Fatalf("counts DEBUG %d HELLO %d PING %d ECHO %d; want 26, 2, 1, 2",
			p.Count("DEBUG"), p.Count("HELLO"), p.Count("PING"), p.Count("ECHO"))
	}
}

func TestDelayReply(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())

	t.Run("later replies wait behind it", func(t *testing.T) {
		const delay = 300 * time.Millisecond
		p.Add(&Rule{Match: func(c Command) bool { return c.Name() == "ECHO" && c.Args[1] == "a" }, Fault: DelayReply(delay), Times: 1})
		c := newClient(t, p.Addr(), 5*time.Second)
		start := time.Now()
		cmds, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			pipe.Echo(ctx, "a")
			pipe.Echo(ctx, "b")
			return nil
		})
		elapsed := time.Since(start)
		if err != nil || cmds[0].(*redis.StringCmd).Val() != "a" || cmds[1].(*redis.StringCmd).Val() != "b" {
			t.Fatalf("pipeline ECHO a, ECHO b = %v, %v; want a, b in order", cmds, err)
		}
		if elapsed < delay {
			t.Fatalf("the replies came after %v, before the %v delay", elapsed, delay)
		}
	})

	t.Run("past the client's timeout", func(t *testing.T) {
		r := p.Add(&Rule{Match: Name("SET"), Fault: DelayReply(600 * time.Millisecond), Times: 1})
		c := newClient(t, p.Addr(), 200*time.Millisecond)
		if err := c.Set(ctx, "k", "v", 0).Err(); !isTimeout(err) {
			t.Fatalf("SET with its reply delayed past the timeout: %v, want a timeout", err)
		}
		testkit.WaitFor(t, "the SET whose reply was late ran", waitTimeout, func() bool { return get(t, s, "k") == "v" })
		if err := c.Set(ctx, "k2", "v2", 0).Err(); err != nil {
			t.Fatalf("the next SET: %v", err)
		}
		if r.Fired() != 1 || p.Count("SET") != 2 {
			t.Fatalf("rule fired %d times, %d SETs; want 1, 2", r.Fired(), p.Count("SET"))
		}
	})
}

func TestDelayRequest(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())

	t.Run("lands late", func(t *testing.T) {
		const delay = 300 * time.Millisecond
		p.Add(&Rule{Match: Name("SET"), Fault: DelayRequest(delay), Times: 1})
		c := newClient(t, p.Addr(), 5*time.Second)
		start := time.Now()
		if err := c.Set(ctx, "late", "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		if elapsed := time.Since(start); elapsed < delay {
			t.Fatalf("SET answered after %v, before its %v delay", elapsed, delay)
		}
		if v := get(t, s, "late"); v != "v" {
			t.Fatalf("late = %q, want v", v)
		}
	})

	t.Run("later requests wait behind it, and land after the client closed", func(t *testing.T) {
		release := make(chan struct{})
		p.Add(&Rule{Match: func(c Command) bool { return c.Name() == "SET" && c.Args[1] == "held" }, Fault: HoldRequest(release)})
		raw := dial(t, p.Addr())
		write(t, raw, append(encode("SET", "held", "1"), encode("SET", "behind", "1")...))
		testkit.WaitFor(t, "both SETs read by the proxy", waitTimeout, func() bool { return p.Count("SET") == 3 })
		if err := raw.Close(); err != nil {
			t.Fatal(err)
		}
		if get(t, s, "held") != "" || get(t, s, "behind") != "" {
			t.Fatal("a SET reached Redis while held")
		}
		close(release)
		testkit.WaitFor(t, "both SETs delivered after the client closed", waitTimeout, func() bool {
			return get(t, s, "held") == "1" && get(t, s, "behind") == "1"
		})
		testkit.WaitFor(t, "the connection closed", waitTimeout, func() bool { return p.Conns() == 0 })
	})
}

// TestHoldRequestUntil: each command the rule fires on gets the hold until
// gives when the proxy reads it, so one hold can be released before an
// earlier one: the command on B lands while A's is still held.
func TestHoldRequestUntil(t *testing.T) {
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	var holds []chan struct{} // guarded by p's lock, where until runs
	r := p.Add(&Rule{Match: Name("SET"), Fault: HoldRequestUntil(func() <-chan struct{} {
		ch := make(chan struct{})
		holds = append(holds, ch)
		return ch
	})})
	a, b := dial(t, p.Addr()), dial(t, p.Addr())
	write(t, a, encode("SET", "a", "1"))
	testkit.WaitFor(t, "SET a read by the proxy", waitTimeout, func() bool { return r.Fired() == 1 })
	write(t, b, encode("SET", "b", "1"))
	testkit.WaitFor(t, "SET b read by the proxy", waitTimeout, func() bool { return r.Fired() == 2 })
	close(holds[1])
	testkit.WaitFor(t, "SET b landed", waitTimeout, func() bool { return get(t, s, "b") == "1" })
	if v := get(t, s, "a"); v != "" {
		t.Fatalf("a = %q while its hold is on, want nothing", v)
	}
	close(holds[0])
	testkit.WaitFor(t, "SET a landed", waitTimeout, func() bool { return get(t, s, "a") == "1" })
}

// TestReorderAcrossConnections: a command held on connection A lands after
// a command sent later on connection B, even after A's client gave up on it
// (the race of a claim that lands after the release meant to undo it).
func TestReorderAcrossConnections(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	release := make(chan struct{})
	r := p.Add(&Rule{Match: func(c Command) bool { return c.Name() == "RPUSH" && c.Args[2] == "a" }, Fault: HoldRequest(release)})

	a := newClient(t, p.Addr(), 200*time.Millisecond)
	b := newClient(t, p.Addr(), 5*time.Second)
	if err := a.RPush(ctx, "l", "a").Err(); !isTimeout(err) {
		t.Fatalf("RPUSH a, held: %v, want a timeout", err)
	}
	if r.Fired() != 1 {
		t.Fatalf("rule fired %d times, want 1", r.Fired())
	}
	if n, err := b.RPush(ctx, "l", "b").Result(); err != nil || n != 1 || p.Answered("RPUSH") != 1 {
		t.Fatalf("RPUSH b, sent later on B = %d, %v, %d RPUSHes answered; want 1 (first in the list), 1", n, err, p.Answered("RPUSH"))
	}
	close(release)
	testkit.WaitFor(t, "RPUSH a landed", waitTimeout, func() bool {
		l, err := s.Client().LRange(ctx, "l", 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(l) == 2 && !slices.Equal(l, []string{"b", "a"}) {
			t.Fatalf("list = %q, want [b a]", l)
		}
		return len(l) == 2
	})
}

func TestDropReply(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())

	t.Run("the call times out, the command ran", func(t *testing.T) {
		p.Add(&Rule{Match: Name("SET"), Fault: DropReply(), Times: 1})
		c := newClient(t, p.Addr(), 200*time.Millisecond)
		if err := c.Set(ctx, "k", "v", 0).Err(); !isTimeout(err) {
			t.Fatalf("SET with its reply dropped: %v, want a timeout", err)
		}
		testkit.WaitFor(t, "the SET whose reply was dropped answered", waitTimeout, func() bool { return p.Answered("SET") == 1 })
		if v := get(t, s, "k"); v != "v" {
			t.Fatalf("k = %q, want v", v)
		}
	})

	t.Run("later commands run, the connection stays silent", func(t *testing.T) {
		p.Add(&Rule{Match: func(c Command) bool { return c.Name() == "SET" && c.Args[1] == "d" }, Fault: DropReply(), Times: 1})
		raw := dial(t, p.Addr())
		write(t, raw, append(encode("SET", "d", "1"), encode("INCR", "after")...))
		testkit.WaitFor(t, "the INCR after the dropped reply ran", waitTimeout, func() bool { return get(t, s, "after") == "1" })
		// Silence can only be shown by waiting for a while.
		if err := raw.SetReadDeadline(time.Now().Add(300 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if n, err := raw.Read(buf); n != 0 || !isTimeout(err) {
			t.Fatalf("read %q, %v after a dropped reply; want nothing until the deadline", buf[:n], err)
		}
		p.CutAll()
		if err := raw.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
			t.Fatal(err)
		}
		if n, err := raw.Read(buf); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("read %q, %v after CutAll; want EOF", buf[:n], err)
		}
	})
}

func TestCut(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	c := newClient(t, p.Addr(), 5*time.Second)
	key := func(k string) func(Command) bool {
		return func(c Command) bool { return len(c.Args) > 1 && c.Args[1] == k }
	}

	p.Add(&Rule{Match: key("before"), Fault: CutBefore()})
	if err := c.Set(ctx, "before", "v", 0).Err(); err == nil || isTimeout(err) {
		t.Fatalf("SET cut before: %v, want a connection error", err)
	}
	if v := get(t, s, "before"); v != "" || p.Answered("SET") != 0 {
		t.Fatalf("a SET cut before it reached Redis set %q, %d SETs answered", v, p.Answered("SET"))
	}

	p.Add(&Rule{Match: key("after"), Fault: CutAfter()})
	if err := c.Set(ctx, "after", "v", 0).Err(); err == nil || isTimeout(err) {
		t.Fatalf("SET cut after: %v, want a connection error", err)
	}
	if v := get(t, s, "after"); v != "v" || p.Answered("SET") != 1 {
		t.Fatalf("after = %q, %d SETs answered; want v, 1: the command ran before the cut", v, p.Answered("SET"))
	}

	// Mid-pipeline: a cut before the third command keeps it and the rest
	// from Redis; a cut after it lets it run.
	for _, tc := range []struct {
		prefix string
		fault  Fault
		ran    int
	}{{"b", CutBefore(), 2}, {"a", CutAfter(), 3}} {
		answered := p.Answered("INCR")
		p.Add(&Rule{Match: key(tc.prefix + "3"), Fault: tc.fault})
		_, err := c.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			for i := 1; i <= 5; i++ {
				pipe.Incr(ctx, tc.prefix+strconv.Itoa(i))
			}
			return nil
		})
		if err == nil {
			t.Fatalf("pipeline %s cut: no error", tc.prefix)
		}
		for i := 1; i <= 5; i++ {
			wantRan := i <= tc.ran
			if got := get(t, s, tc.prefix+strconv.Itoa(i)); (got == "1") != wantRan {
				t.Errorf("pipeline %s: INCR %d ran: %v, want %v", tc.prefix, i, got == "1", wantRan)
			}
		}
		if n := p.Answered("INCR") - answered; n != tc.ran {
			t.Errorf("pipeline %s: %d INCRs answered, want %d", tc.prefix, n, tc.ran)
		}
	}
}

func TestRules(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	c := newClient(t, p.Addr(), 5*time.Second)

	// DelayReply(0) fires without changing anything: a rule to count with.
	limited := p.Add(&Rule{Match: Name("GET"), Fault: DelayReply(0), Times: 2})
	for range 5 {
		if err := c.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
	}
	if limited.Fired() != 2 {
		t.Fatalf("a rule limited to 2 fired %d times", limited.Fired())
	}

	const seed, probability, commands = 7, 0.3, 200
	chance := p.Add(&Rule{Match: Name("INCR"), Fault: DelayReply(0), Probability: probability, Rand: rand.New(rand.NewPCG(seed, seed))})
	for range commands {
		if err := c.Incr(ctx, "n").Err(); err != nil {
			t.Fatal(err)
		}
	}
	replay := rand.New(rand.NewPCG(seed, seed))
	want := 0
	for range commands {
		if replay.Float64() < probability {
			want++
		}
	}
	if chance.Fired() != want {
		t.Fatalf("a rule of probability %v fired %d times over %d commands; the same seed says %d", probability, chance.Fired(), commands, want)
	}

	// Per direction, the first added rule that matches wins.
	first := p.Add(&Rule{Match: Name("ECHO"), Fault: DelayReply(0)})
	second := p.Add(&Rule{Match: Name("ECHO"), Fault: DropReply()})
	request := p.Add(&Rule{Match: Name("ECHO"), Fault: DelayRequest(0)})
	if err := c.Echo(ctx, "x").Err(); err != nil {
		t.Fatal(err)
	}
	if first.Fired() != 1 || second.Fired() != 0 || request.Fired() != 1 {
		t.Fatalf("fired: first reply rule %d, second %d, request rule %d; want 1, 0, 1", first.Fired(), second.Fired(), request.Fired())
	}
	first.Remove()
	request.Remove()
	second.Remove()
	if err := c.Echo(ctx, "x").Err(); err != nil {
		t.Fatalf("ECHO after the rules were removed: %v", err)
	}
	if first.Fired() != 1 || second.Fired() != 0 {
		t.Fatalf("removed rules fired: %d, %d", first.Fired(), second.Fired())
	}
}

func TestPauseResume(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	c := newClient(t, p.Addr(), 5*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	p.Pause()
	done := make(chan *redis.IntCmd, 1)
	go func() { done <- c.Incr(ctx, "n") }()
	testkit.WaitFor(t, "INCR read by the paused proxy", waitTimeout, func() bool { return p.Count("INCR") == 1 })
	if v := get(t, s, "n"); v != "" || p.Answered("INCR") != 0 {
		t.Fatalf("n = %q, %d INCRs answered while the proxy is paused; want none run", v, p.Answered("INCR"))
	}
	select {
	case cmd := <-done:
		t.Fatalf("INCR answered while the proxy is paused: %v", cmd)
	default:
	}
	p.Resume()
	if n, err := (<-done).Result(); err != nil || n != 1 {
		t.Fatalf("INCR after Resume = %d, %v; want 1", n, err)
	}
}

func TestRefuseAndCutAll(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	c := newClient(t, p.Addr(), 5*time.Second)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.Refuse(true)
	p.CutAll()
	testkit.WaitFor(t, "connections closed", waitTimeout, func() bool { return p.Conns() == 0 })
	for range 2 { // the cut connection, then a refused one
		if err := c.Ping(ctx).Err(); err == nil {
			t.Fatal("PING answered while the proxy refuses connections")
		}
	}
	if n := p.Count("PING"); n != 1 {
		t.Fatalf("the proxy read %d PINGs; want 1, from before the cut", n)
	}
	p.Refuse(false)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING once the proxy serves again: %v", err)
	}
}

// TestUpstreamRestart: a Redis restart closes the connections through the
// proxy, and new ones reach the restarted server, its data lost.
func TestUpstreamRestart(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	if err := newClient(t, p.Addr(), 5*time.Second).Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Restart()
	testkit.WaitFor(t, "the proxy closed the connection Redis closed", waitTimeout, func() bool { return p.Conns() == 0 })
	if err := newClient(t, p.Addr(), 5*time.Second).Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET k after the restart: %v, want redis.Nil", err)
	}
}

// TestPubSubRESP3: pushes pass, and pair with no command: a fault on the
// PING a subscribed connection sends after SUBSCRIBE hits that PING.
func TestPubSubRESP3(t *testing.T) {
	ctx := context.Background()
	s := redistest.Standalone(t)
	p := New(t, s.Addr())
	c := newClient(t, p.Addr(), 5*time.Second)
	sub := c.Subscribe(ctx, "ch")
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Client().Publish(ctx, "ch", "hello").Err(); err != nil {
		t.Fatal(err)
	}
	if msg, err := sub.ReceiveMessage(ctx); err != nil || msg.Payload != "hello" {
		t.Fatalf("message = %v, %v; want hello", msg, err)
	}
	r := p.Add(&Rule{Match: Name("PING"), Fault: CutAfter()})
	if err := sub.Ping(ctx); err != nil {
		t.Fatal(err) // PING only sends
	}
	if _, err := sub.Receive(ctx); err == nil {
		t.Fatal("the PONG of a PING cut after it came through")
	}
	if r.Fired() != 1 {
		t.Fatalf("rule fired %d times, want 1", r.Fired())
	}
}
