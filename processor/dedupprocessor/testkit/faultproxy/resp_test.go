package faultproxy

import (
	"bufio"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
)

func TestReadReplyFrames(t *testing.T) {
	frames := []struct {
		raw  string
		push bool
	}{
		{raw: "+OK\r\n"},
		{raw: "-ERR wrong\r\n"},
		{raw: ":42\r\n"},
		{raw: "$5\r\nhello\r\n"},
		{raw: "$0\r\n\r\n"},
		{raw: "$-1\r\n"},
		{raw: "*-1\r\n"},
		{raw: "*0\r\n"},
		{raw: "*2\r\n$1\r\na\r\n*1\r\n:1\r\n"},
		{raw: "$6\r\na\r\nb\r\n\r\n"}, // a CRLF inside a bulk string
		{raw: "_\r\n"},
		{raw: ",3.14\r\n"},
		{raw: "#t\r\n"},
		{raw: "(3492890328409238509324850943850943825024385\r\n"},
		{raw: "!3\r\nbad\r\n"},
		{raw: "=8\r\ntxt:some\r\n"},
		{raw: "%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n_\r\n"},
		{raw: "~2\r\n+a\r\n+b\r\n"},
		{raw: ">2\r\n$7\r\nmessage\r\n:1\r\n", push: true},
		{raw: "|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n"}, // an attribute and the value it annotates
		{raw: "$?\r\n;2\r\nab\r\n;1\r\nc\r\n;0\r\n"},
		{raw: "*?\r\n:1\r\n*?\r\n+x\r\n.\r\n.\r\n"},
		{raw: "%?\r\n+a\r\n:1\r\n.\r\n"},
	}
	var stream strings.Builder
	for _, f := range frames {
		stream.WriteString(f.raw)
	}
	r := bufio.NewReader(strings.NewReader(stream.String()))
	for _, f := range frames {
		raw, push, err := readReply(r)
		if err != nil || string(raw) != f.raw || push != f.push {
			t.Fatalf("readReply = %q, push %v, %v; want %q, push %v", raw, push, err, f.raw, f.push)
		}
	}
	if _, _, err := readReply(r); !errors.Is(err, io.EOF) {
		t.Fatalf("readReply at the end = %v, want EOF", err)
	}
}

func TestReadReplyErrors(t *testing.T) {
	for _, in := range []string{"?x\r\n", "$x\r\n", "$3\r\nabcd\r\n", "+OK\n", ".\r\n", "$" + "536870913\r\n"} {
		if _, _, err := readReply(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, errProtocol) {
			t.Errorf("readReply(%q) = %v, want a protocol error", in, err)
		}
	}
	for _, in := range []string{"$5\r\nab", "*2\r\n:1\r\n", "+OK"} {
		if _, _, err := readReply(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Errorf("readReply(%q) = %v, want an unexpected EOF", in, err)
		}
	}
}

func TestReadRequest(t *testing.T) {
	requests := []struct {
		raw  string
		args []string
	}{
		{raw: "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\nv\r\nw\r\n", args: []string{"SET", "k", "v\r\nw"}},
		{raw: "PING\r\n", args: []string{"PING"}},
		{raw: "set  k v\n", args: []string{"set", "k", "v"}},
		{raw: "\r\n", args: []string{}},
		{raw: "*1\r\n$4\r\nPING\r\n", args: []string{"PING"}},
	}
	var stream strings.Builder
	for _, q := range requests {
		stream.WriteString(q.raw)
	}
	r := bufio.NewReader(strings.NewReader(stream.String()))
	for _, q := range requests {
		raw, args, err := readRequest(r)
		if err != nil || string(raw) != q.raw || !slices.Equal(args, q.args) {
			t.Fatalf("readRequest = %q, %q, %v; want %q, %q", raw, args, err, q.raw, q.args)
		}
	}
	for _, in := range []string{"*1\r\n:1\r\n", "*x\r\n", "*1\r\n$-1\r\n"} {
		if _, _, err := readRequest(bufio.NewReader(strings.NewReader(in))); !errors.Is(err, errProtocol) {
			t.Errorf("readRequest(%q) = %v, want a protocol error", in, err)
		}
	}
}
