package bench

import (
	"bufio"
	"net"
	"strings"
	"testing"
)

// lineServer answers every line it reads with "+OK <line>\r\n", like a
// RESP server answering inline commands.
func lineServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte("+OK " + line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestRoundTripProxy(t *testing.T) {
	p, err := NewRoundTripProxy(lineServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	// request sends lines in one write and reads as many answers.
	request := func(lines ...string) {
		t.Helper()
		if _, err := c.Write([]byte(strings.Join(lines, "\n") + "\n")); err != nil {
			t.Fatal(err)
		}
		for _, l := range lines {
			got, err := r.ReadString('\n')
			if err != nil || got != "+OK "+l+"\n" {
				t.Fatalf("answer %q, %v; want +OK %s", got, err, l)
			}
		}
	}
	if p.Count() != 0 {
		t.Fatalf("count %d before any request", p.Count())
	}
	request("PING")
	if p.Count() != 1 {
		t.Fatalf("count %d after one request, want 1", p.Count())
	}
	// A pipeline of 1000 commands in one write is one round trip.
	cmds := make([]string, 1000)
	for i := range cmds {
		cmds[i] = "SET k" + strings.Repeat("x", 40)
	}
	request(cmds...)
	if p.Count() != 2 {
		t.Fatalf("count %d after a pipeline, want 2", p.Count())
	}
	// A second connection counts into the same total.
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Write([]byte("GET a\n")); err != nil {
		t.Fatal(err)
	}
	if got, err := bufio.NewReader(c2).ReadString('\n'); err != nil || got != "+OK GET a\n" {
		t.Fatalf("second connection: %q, %v", got, err)
	}
	request("PING", "PING")
	if p.Count() != 4 {
		t.Fatalf("count %d, want 4", p.Count())
	}
}
