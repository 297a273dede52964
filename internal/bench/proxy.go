package bench

import (
	"net"
	"sync"
	"sync/atomic"
)

// RoundTripProxy forwards TCP connections from its own loopback port to a
// target and counts round trips: on each connection, every switch from the
// client talking to the server answering. A request is counted once however
// many segments it and its answer take, and a pipeline of commands sent
// together and answered together is one round trip, which is what the
// network sees.
//
// The count is exact for request/response protocols like RESP where a client
// waits for the answer before sending its next request on that connection:
// the answer is counted before it is passed on, so when the client has its
// answer, Count includes that round trip.
type RoundTripProxy struct {
	target string
	ln     net.Listener
	trips  atomic.Int64
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// NewRoundTripProxy listens on a free loopback port and forwards to target.
func NewRoundTripProxy(target string) (*RoundTripProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &RoundTripProxy{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients connect to.
func (p *RoundTripProxy) Addr() string { return p.ln.Addr().String() }

// Count is the round trips seen so far, over all connections.
func (p *RoundTripProxy) Count() int64 { return p.trips.Load() }

// Close stops accepting, cuts every connection and waits for the forwarding
// goroutines.
func (p *RoundTripProxy) Close() error {
	err := p.ln.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	return err
}

func (p *RoundTripProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *RoundTripProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			_ = client.Close()
			_ = server.Close()
			return
		}
		// talking: 1 after the client sent something the server has not
		// answered yet; the first answer bytes after it make a round trip.
		var mu sync.Mutex
		talking := false
		p.wg.Add(2)
		go func() { // client -> server
			defer p.wg.Done()
			defer server.Close()
			p.pipe(server, client, func() {
				mu.Lock()
				talking = true
				mu.Unlock()
			})
		}()
		go func() { // server -> client
			defer p.wg.Done()
			defer client.Close()
			p.pipe(client, server, func() {
				mu.Lock()
				if talking {
					talking = false
					p.trips.Add(1)
				}
				mu.Unlock()
			})
		}()
	}
}

// pipe copies from src to dst, calling seen after each read and before
// passing the bytes on.
func (p *RoundTripProxy) pipe(dst, src net.Conn, seen func()) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			seen()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil { // io.EOF or a cut connection: either way, done
			return
		}
	}
}
