// Package faultproxy is a TCP proxy in front of a Redis server that injects
// faults into single commands and their replies, so that tests can make the
// real client and the real server live through a slow, lossy or broken
// network at exactly the command that matters.
//
// A Proxy listens on a loopback port of its own and opens one connection to
// Redis for each client connection. It reads requests (RESP arrays, and
// inline commands, which only pass through) and replies (every RESP2 and
// RESP3 type) whole, so a Rule can pick out a command by a predicate on its
// name and arguments and fault the command on its way to Redis, or its
// reply on its way back. Shopify's toxiproxy cannot serve here: it acts on
// byte streams, so it can neither target one command's reply nor hold one
// request while later requests on other connections pass.
//
// What each fault promises:
//
//   - DelayRequest, HoldRequest, HoldRequestUntil: the command reaches
//     Redis no sooner than the delay after the proxy read it, or once the
//     hold is released. The commands after it on the same connection wait
//     behind it. If the client closes its connection meanwhile, the command
//     is still delivered before the proxy closes its side towards Redis, as
//     TCP delivers what was sent before a close.
//   - DelayReply: the command ran; its reply reaches the client no sooner
//     than the delay after Redis sent it. The replies after it wait behind
//     it.
//   - DropReply: the command ran; its reply never reaches the client, and
//     neither does any later reply on that connection. Later commands still
//     reach Redis and run. The connection stays open and silent until the
//     client closes it or it is cut.
//   - CutBefore: the commands before it were delivered; when its turn comes
//     the client's connection is closed, and neither it nor any later
//     command reaches Redis.
//   - CutAfter: the command and those before it ran and no later command
//     reaches Redis; the replies before it are delivered, then the client's
//     connection is closed where its reply would have come.
//
// Whatever the proxy forwarded to Redis runs, a cut or the client's close
// notwithstanding: the proxy then half-closes its connection to Redis and
// reads it until Redis closes it. Only Close ends connections abruptly.
//
// Reordering: replies on one connection come in the order of its commands,
// by the protocol, so the proxy never reorders within a connection. To make
// a command land after one sent later, delay or hold it: commands on other
// connections pass meanwhile.
//
// A test installs rules and watches what they did:
//
//	p := faultproxy.New(t, server.Addr())
//	late := p.Add(&faultproxy.Rule{
//		Match: faultproxy.Script(claim.Hash()),
//		Fault: faultproxy.DelayReply(600 * time.Millisecond),
//		Times: 1,
//	})
//	// ... give the client p.Addr(), run, then check late.Fired(),
//	// p.ScriptCount(claim.Hash()) (sent) and p.ScriptAnswered(...) (ran).
//
// Pub/sub is understood under RESP3 (go-redis v9's default), where Redis
// answers (un)subscribing and publishes by pushes, which pair with no
// command, so no reply fault applies to them. Not understood: pub/sub under
// RESP2 (a reply per channel), CLIENT REPLY OFF|SKIP and MONITOR; the
// replies on such a connection would pair with the wrong commands.
package faultproxy

import (
	"bufio"
	"crypto/sha1" //nolint:gosec // Redis names scripts by their SHA1 (EVALSHA): an identifier, not security
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// dialTimeout bounds the connection to Redis made for each client.
	dialTimeout = 5 * time.Second
	// bufferSize is the size of each connection's read and write buffers; a
	// line (an inline command, a RESP header) longer than this is refused.
	bufferSize = 64 << 10
	// queueSize bounds the commands and replies queued on one connection
	// behind a delay before the proxy stops reading that connection.
	queueSize = 1024
)

// Command is one command a client sent, as a Rule's Match sees it.
type Command struct {
	// Conn numbers the client connection this command came on: 1 for the
	// proxy's first, in the order the proxy accepted them.
	Conn int
	// Args are the command's arguments, its name first, as sent.
	Args []string
}

// Name returns the command's name in upper case.
func (c Command) Name() string {
	if len(c.Args) == 0 {
		return ""
	}
	return strings.ToUpper(c.Args[0])
}

// Script returns the SHA1 (lower-case hex) of the Lua script the command
// runs: the SHA an EVALSHA names, or the SHA of an EVAL's source, as Redis
// computes it. It returns "" for other commands.
func (c Command) Script() string {
	if len(c.Args) < 2 {
		return ""
	}
	switch c.Name() {
	case "EVALSHA", "EVALSHA_RO":
		return strings.ToLower(c.Args[1])
	case "EVAL", "EVAL_RO":
		sum := sha1.Sum([]byte(c.Args[1])) //nolint:gosec // the script's EVALSHA name, as Redis computes it
		return hex.EncodeToString(sum[:])
	}
	return ""
}

// Name matches the commands with one of the given names, in any case.
func Name(names ...string) func(Command) bool {
	return func(c Command) bool {
		for _, n := range names {
			if strings.EqualFold(c.Name(), n) {
				return true
			}
		}
		return false
	}
}

// Script matches the commands that run the script with the given SHA1, by
// EVALSHA or by EVAL of its source (go-redis's Script.Run sends EVAL when
// Redis answers NOSCRIPT).
func Script(sha string) func(Command) bool {
	sha = strings.ToLower(sha)
	return func(c Command) bool { return c.Script() == sha }
}

type faultKind int

const (
	noFault faultKind = iota
	delayRequest
	cutBefore
	delayReply // the reply faults come last: see onReply
	dropReply
	cutAfter
)

// Fault is what a Rule does to a command it fires on. The package doc says
// what each promises.
type Fault struct {
	kind  faultKind
	delay time.Duration
	until <-chan struct{}
	hold  func() <-chan struct{} // gives until when the command is judged
}

func (f Fault) onReply() bool { return f.kind >= delayReply }

// waits reports whether the fault holds its command or reply for a while.
func (f Fault) waits() bool { return f.delay > 0 || f.until != nil }

// DelayRequest makes the command reach Redis d after the proxy read it.
func DelayRequest(d time.Duration) Fault { return Fault{kind: delayRequest, delay: d} }

// HoldRequest makes the command reach Redis once release is closed.
func HoldRequest(release <-chan struct{}) Fault {
	return Fault{kind: delayRequest, until: release}
}

// HoldRequestUntil makes the command reach Redis once the channel that
// until returns is closed. until runs when the proxy reads the command,
// under the proxy's lock: it must be quick and must not call the Proxy.
func HoldRequestUntil(until func() <-chan struct{}) Fault {
	return Fault{kind: delayRequest, hold: until}
}

// DelayReply makes the command's reply reach the client d after Redis sent
// it. DelayReply(0) changes nothing: a rule with it only counts matches.
func DelayReply(d time.Duration) Fault { return Fault{kind: delayReply, delay: d} }

// DropReply lets the command run and keeps its reply, and every later reply
// on the connection, from the client.
func DropReply() Fault { return Fault{kind: dropReply} }

// CutBefore closes the connection in the command's place, before it reaches
// Redis.
func CutBefore() Fault { return Fault{kind: cutBefore} }

// CutAfter lets the command run and closes the connection in its reply's
// place.
func CutAfter() Fault { return Fault{kind: cutAfter} }

// Rule applies a Fault to the commands it matches. A command takes at most
// one request fault (DelayRequest, HoldRequest, CutBefore) and one reply
// fault (the others): per direction, that of the first added rule that
// matches it and fires. Rules are judged when the proxy reads the command.
// Do not change a Rule once added.
type Rule struct {
	// Match selects the commands; nil selects every command. It runs under
	// the proxy's lock: it must be quick and must not call the Proxy.
	Match func(Command) bool
	// Fault is what is done to the commands the rule fires on.
	Fault Fault
	// Times limits the rule to its next Times firings, after which it is
	// removed; 0 means no limit.
	Times int
	// Probability, with Rand, makes the rule fire on a matching command
	// when Rand.Float64() < Probability. A seeded Rand makes a run
	// reproducible as far as the order of commands is. The proxy draws from
	// Rand under its lock; nothing else may use Rand meanwhile. A rule
	// without Rand fires on every matching command.
	Probability float64
	Rand        *rand.Rand

	p     *Proxy
	fired int // guarded by p.mu
}

// Fired returns how many commands the rule has fired on.
func (r *Rule) Fired() int {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	return r.fired
}

// Remove stops the rule from firing on commands read from now on; faults it
// already fired on still happen.
func (r *Rule) Remove() {
	r.p.mu.Lock()
	defer r.p.mu.Unlock()
	for i, x := range r.p.rules {
		if x == r {
			r.p.rules = append(r.p.rules[:i], r.p.rules[i+1:]...)
			return
		}
	}
}

// Proxy is a fault-injecting proxy in front of one Redis address. Its
// methods are safe for concurrent use and fail the test on error.
type Proxy struct {
	tb       testing.TB
	upstream string
	ln       net.Listener
	closed   chan struct{} // closed by Close
	wg       sync.WaitGroup

	mu       sync.Mutex
	isClosed bool
	rules    []*Rule
	conns    map[*conn]struct{}
	accepted int
	// sent and answered count the commands clients sent and those Redis
	// answered, by upper-case name and by lower-case script SHA (the two
	// never collide).
	sent     map[string]int
	answered map[string]int
	resume   chan struct{} // non-nil while paused; Resume closes it
	refuse   bool
}

// New starts a proxy on a free loopback port that forwards to the Redis
// server at upstream (host:port), and closes it when the test ends. Each
// client connection gets its own connection to upstream, dialed when the
// client connects; if that dial fails, the client's connection is closed.
func New(tb testing.TB, upstream string) *Proxy {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("faultproxy: listen: %v", err)
	}
	p := &Proxy{
		tb:       tb,
		upstream: upstream,
		ln:       ln,
		closed:   make(chan struct{}),
		conns:    map[*conn]struct{}{},
		sent:     map[string]int{},
		answered: map[string]int{},
	}
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Addr returns the proxy's host:port, for clients to dial.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the proxy's port.
func (p *Proxy) Port() int { return p.ln.Addr().(*net.TCPAddr).Port }

// Add installs r; it fires on commands read from now on. It returns r.
func (p *Proxy) Add(r *Rule) *Rule {
	p.tb.Helper()
	switch {
	case r.Fault.kind == noFault:
		p.tb.Fatalf("faultproxy: a rule needs a Fault")
	case r.Rand == nil && r.Probability != 0:
		p.tb.Fatalf("faultproxy: a rule with a Probability needs a Rand")
	case r.Probability < 0 || r.Probability > 1:
		p.tb.Fatalf("faultproxy: Probability %v is outside [0, 1]", r.Probability)
	case r.Times < 0:
		p.tb.Fatalf("faultproxy: Times %d is negative", r.Times)
	case r.p != nil:
		p.tb.Fatalf("faultproxy: the rule was added already")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	r.p = p
	p.rules = append(p.rules, r)
	return r
}

// Count returns how many commands named name (in any case) clients sent
// through the proxy, faulted ones included.
func (p *Proxy) Count(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[strings.ToUpper(name)]
}

// ScriptCount returns how many commands clients sent through the proxy to
// run the script with the given SHA1, by EVALSHA or EVAL, faulted ones
// included.
func (p *Proxy) ScriptCount(sha string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[strings.ToLower(sha)]
}

// Answered returns how many commands named name (in any case) Redis
// answered through the proxy, with an error reply or not: those that ran,
// whether or not their reply reached the client.
func (p *Proxy) Answered(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered[strings.ToUpper(name)]
}

// ScriptAnswered returns how many commands running the script with the
// given SHA1 Redis answered through the proxy, as Answered does.
func (p *Proxy) ScriptAnswered(sha string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.answered[strings.ToLower(sha)]
}

// Conns returns the number of client connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Pause holds all traffic, both ways, on every connection, new ones
// included, until Resume: nothing not yet forwarded is forwarded. Commands
// are still read and counted, and rules judged, meanwhile.
func (p *Proxy) Pause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume == nil {
		p.resume = make(chan struct{})
	}
}

// Resume lets the traffic held by Pause go, in order.
func (p *Proxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.resume != nil {
		close(p.resume)
		p.resume = nil
	}
}

// Refuse makes the proxy reset every new connection at once (on true) or
// serve new connections again (on false). Open connections are not
// touched; CutAll cuts them.
func (p *Proxy) Refuse(refuse bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refuse = refuse
}

// CutAll cuts every open connection now, as CutBefore would on its next
// command: what was forwarded runs, nothing else does.
func (p *Proxy) CutAll() {
	for _, c := range p.snapshot() {
		c.cutNow()
	}
}

// Close stops the proxy: it stops listening, closes every connection both
// ways at once, and waits until all its goroutines ended. Held and delayed
// traffic is dropped. Close is idempotent.
func (p *Proxy) Close() {
	p.mu.Lock()
	already := p.isClosed
	p.isClosed = true
	p.mu.Unlock()
	if !already {
		close(p.closed)
		_ = p.ln.Close()
		for _, c := range p.snapshot() {
			c.cutNow()
			_ = c.upstream.Close()
		}
	}
	p.wg.Wait()
}

func (p *Proxy) snapshot() []*conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		out = append(out, c)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		client := nc.(*net.TCPConn)
		p.mu.Lock()
		refuse := p.refuse
		p.accepted++
		id := p.accepted
		p.mu.Unlock()
		if refuse {
			_ = client.SetLinger(0) // a reset, the closest to a refused dial
			_ = client.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(client, id)
	}
}

// judge counts cmd and picks its faults.
func (p *Proxy) judge(cmd Command) (request, reply Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent[cmd.Name()]++
	if sha := cmd.Script(); sha != "" {
		p.sent[sha]++
	}
	kept := p.rules[:0]
	for _, r := range p.rules {
		slot := &request
		if r.Fault.onReply() {
			slot = &reply
		}
		if slot.kind == noFault && (r.Match == nil || r.Match(cmd)) &&
			(r.Rand == nil || r.Rand.Float64() < r.Probability) {
			*slot = r.Fault
			if slot.hold != nil {
				slot.until = slot.hold()
			}
			r.fired++
		}
		if r.Times == 0 || r.fired < r.Times {
			kept = append(kept, r)
		}
	}
	clear(p.rules[len(kept):])
	p.rules = kept
	return request, reply
}

// answer counts a's reply.
func (p *Proxy) answer(a awaited) {
	if a.name == "" {
		return // a reply no command waited for
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.answered[a.name]++
	if a.script != "" {
		p.answered[a.script]++
	}
}

// gate waits while the proxy is paused. It returns false if c was cut or
// the proxy closed meanwhile.
func (p *Proxy) gate(c *conn) bool {
	p.mu.Lock()
	resume := p.resume
	p.mu.Unlock()
	if resume == nil {
		return true
	}
	select {
	case <-resume:
		return true
	case <-c.cut:
	case <-p.closed:
	}
	return false
}

func (p *Proxy) paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resume != nil
}

// conn is one client connection and its connection to Redis. Four
// goroutines serve it: readRequests judges each command and queues it for
// forward, which writes it to Redis when its delay is over; readReplies pairs
// each reply with its command's reply fault and queues it for deliver, which
// writes it to the client when its delay is over.
type conn struct {
	p        *Proxy
	id       int
	client   *net.TCPConn
	upstream *net.TCPConn
	requests chan request
	replies  chan reply
	cut      chan struct{} // closed by cutNow
	cutOnce  sync.Once

	mu sync.Mutex
	// pending holds the commands queued or forwarded whose replies have
	// not come yet, oldest first.
	pending []awaited
}

// awaited is a command waiting for its reply.
type awaited struct {
	fault        Fault // its reply fault
	name, script string
}

// answeredByPush holds the commands that RESP3 answers by pushes only.
var answeredByPush = map[string]bool{
	"SUBSCRIBE": true, "PSUBSCRIBE": true, "SSUBSCRIBE": true,
	"UNSUBSCRIBE": true, "PUNSUBSCRIBE": true, "SUNSUBSCRIBE": true,
}

type request struct {
	raw   []byte
	fault Fault
	last  bool // no later command may reach Redis (CutAfter)
	read  time.Time
}

type reply struct {
	raw   []byte
	fault Fault
	read  time.Time
}

func (p *Proxy) serve(client *net.TCPConn, id int) {
	defer p.wg.Done()
	nc, err := net.DialTimeout("tcp", p.upstream, dialTimeout)
	if err != nil {
		_ = client.Close()
		return
	}
	c := &conn{
		p:        p,
		id:       id,
		client:   client,
		upstream: nc.(*net.TCPConn),
		requests: make(chan request, queueSize),
		replies:  make(chan reply, queueSize),
		cut:      make(chan struct{}),
	}
	p.mu.Lock()
	closed := p.isClosed
	if !closed {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if closed {
		_ = client.Close()
		_ = c.upstream.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(c.readRequests)
	wg.Go(c.forward)
	wg.Go(c.readReplies)
	c.deliver()
	wg.Wait()
	_ = c.upstream.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// cutNow closes the client's side. Requests not yet forwarded are dropped;
// forward half-closes the Redis side once the client's side is read out.
func (c *conn) cutNow() {
	c.cutOnce.Do(func() {
		close(c.cut)
		_ = c.client.Close()
	})
}

func (c *conn) isCut() bool {
	select {
	case <-c.cut:
		return true
	default:
		return false
	}
}

// wait holds a command or reply for its fault's delay or hold, counted from
// when the proxy read it. It returns false if c was cut or the proxy closed
// meanwhile.
func (c *conn) wait(f Fault, read time.Time) bool {
	if f.delay > 0 {
		t := time.NewTimer(time.Until(read.Add(f.delay)))
		defer t.Stop()
		select {
		case <-t.C:
		case <-c.cut:
			return false
		case <-c.p.closed:
			return false
		}
	}
	if f.until != nil {
		select {
		case <-f.until:
		case <-c.cut:
			return false
		case <-c.p.closed:
			return false
		}
	}
	return true
}

func (c *conn) readRequests() {
	defer close(c.requests)
	r := bufio.NewReaderSize(c.client, bufferSize)
	for {
		raw, args, err := readRequest(r)
		if err != nil {
			if errors.Is(err, errProtocol) {
				c.cutNow()
			}
			return
		}
		req := request{raw: raw, read: time.Now()}
		if len(args) > 0 {
			cmd := Command{Conn: c.id, Args: args}
			var replyFault Fault
			req.fault, replyFault = c.p.judge(cmd)
			req.last = replyFault.kind == cutAfter
			if req.fault.kind != cutBefore && !answeredByPush[cmd.Name()] {
				c.mu.Lock()
				c.pending = append(c.pending, awaited{fault: replyFault, name: cmd.Name(), script: cmd.Script()})
				c.mu.Unlock()
			}
		}
		c.requests <- req
	}
}

// forward writes the requests to Redis in order, each once its delay is
// over, then half-closes the connection to Redis so that Redis runs what it
// got and closes it.
func (c *conn) forward() {
	w := bufio.NewWriterSize(c.upstream, bufferSize)
	stopped := false
	for req := range c.requests {
		if stopped || c.isCut() {
			continue
		}
		if req.fault.waits() || req.fault.kind == cutBefore || c.p.paused() {
			if w.Flush() != nil {
				stopped = true
				continue
			}
		}
		if !c.wait(req.fault, req.read) || !c.p.gate(c) {
			stopped = true
			continue
		}
		if req.fault.kind == cutBefore {
			c.cutNow()
			stopped = true
			continue
		}
		_, err := w.Write(req.raw)
		stopped = err != nil || req.last
		if err == nil && (stopped || len(c.requests) == 0) {
			stopped = w.Flush() != nil || stopped
		}
	}
	_ = w.Flush()
	_ = c.upstream.CloseWrite()
}

func (c *conn) readReplies() {
	defer close(c.replies)
	r := bufio.NewReaderSize(c.upstream, bufferSize)
	for {
		raw, push, err := readReply(r)
		if err != nil {
			return
		}
		rep := reply{raw: raw, read: time.Now()}
		if !push {
			c.mu.Lock()
			var a awaited
			if len(c.pending) > 0 {
				a = c.pending[0]
				c.pending = c.pending[1:]
			}
			c.mu.Unlock()
			rep.fault = a.fault
			c.p.answer(a)
		}
		c.replies <- rep
	}
}

// deliver writes the replies to the client in order, each once its delay is
// over, and closes the client's side once Redis closed its own.
func (c *conn) deliver() {
	w := bufio.NewWriterSize(c.client, bufferSize)
	silent := false
	for rep := range c.replies {
		if silent || c.isCut() {
			continue
		}
		if rep.fault.waits() || rep.fault.kind == cutAfter || c.p.paused() {
			if w.Flush() != nil {
				silent = true
				continue
			}
		}
		if !c.wait(rep.fault, rep.read) || !c.p.gate(c) {
			silent = true
			continue
		}
		switch rep.fault.kind {
		case dropReply:
			silent = true
			continue
		case cutAfter:
			c.cutNow()
			silent = true
			continue
		}
		if _, err := w.Write(rep.raw); err != nil {
			silent = true
			continue
		}
		if len(c.replies) == 0 && w.Flush() != nil {
			silent = true
		}
	}
	if !silent {
		_ = w.Flush()
	}
	_ = c.client.Close()
}
