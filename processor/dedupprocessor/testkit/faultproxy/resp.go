package faultproxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// maxBulk bounds a bulk string's declared length, so a corrupt stream fails
// instead of allocating without limit. Redis's own proto-max-bulk-len
// default is 512 MB.
const maxBulk = 512 << 20

var errProtocol = errors.New("faultproxy: RESP protocol error")

// readRequest reads one command a client sent: a RESP array of bulk strings,
// or an inline command (a line of space-separated words, as telnet and
// redis-cli --pipe may send). It returns the bytes as read, to forward them
// unchanged, and the arguments. An empty inline line has no arguments; Redis
// ignores it and sends no reply.
func readRequest(r *bufio.Reader) (raw []byte, args []string, err error) {
	first, err := r.Peek(1)
	if err != nil {
		return nil, nil, err
	}
	if first[0] != '*' {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, nil, lineError(r, line, err)
		}
		return append([]byte(nil), line...), strings.Fields(string(line)), nil
	}
	line, err := readLine(r, nil)
	if err != nil {
		return nil, nil, err
	}
	n, err := length(line)
	if err != nil || n < 0 {
		return nil, nil, fmt.Errorf("%w: request array %q", errProtocol, line)
	}
	raw = line
	args = make([]string, 0, n)
	for range n {
		start := len(raw)
		if raw, err = readLine(r, raw); err != nil {
			return nil, nil, err
		}
		head := raw[start:]
		if head[0] != '$' {
			return nil, nil, fmt.Errorf("%w: request argument %q is not a bulk string", errProtocol, head)
		}
		size, err := length(head)
		if err != nil || size < 0 {
			return nil, nil, fmt.Errorf("%w: request argument %q", errProtocol, head)
		}
		start = len(raw)
		if raw, err = readBulk(r, raw, size); err != nil {
			return nil, nil, err
		}
		args = append(args, string(raw[start:start+size]))
	}
	return raw, args, nil
}

// readReply reads one reply Redis sent, of any RESP2 or RESP3 type, an
// attribute included with the value it annotates, and returns its bytes.
// push is true for a RESP3 push (pub/sub messages, invalidations): data
// Redis sends on its own, which answers no command.
func readReply(r *bufio.Reader) (raw []byte, push bool, err error) {
	raw, kind, err := readValue(r, nil)
	if err != nil {
		return nil, false, err
	}
	if kind == '.' {
		return nil, false, fmt.Errorf("%w: end of a streamed aggregate outside one", errProtocol)
	}
	return raw, kind == '>', nil
}

// readValue appends one RESP value to raw and returns its type byte: '.'
// for the end marker of a streamed aggregate, the annotated value's type for
// an attribute.
func readValue(r *bufio.Reader, raw []byte) ([]byte, byte, error) {
	start := len(raw)
	raw, err := readLine(r, raw)
	if err != nil {
		return nil, 0, err
	}
	head := raw[start:]
	kind := head[0]
	switch kind {
	case '+', '-', ':', '_', ',', '#', '(', '.':
		return raw, kind, nil
	case '$', '!', '=':
		if bytes.Equal(head, []byte("$?\r\n")) {
			raw, err = readStreamedString(r, raw)
			return raw, kind, err
		}
		n, err := length(head)
		if err != nil {
			return nil, 0, err
		}
		if n < 0 { // RESP2 null bulk string
			return raw, kind, nil
		}
		raw, err = readBulk(r, raw, n)
		return raw, kind, err
	case '*', '~', '>', '%', '|':
		per := 1
		if kind == '%' || kind == '|' {
			per = 2 // a map's or attribute's entries are key-value pairs
		}
		if head[1] == '?' {
			raw, err = readStreamedAggregate(r, raw)
		} else {
			var n int
			if n, err = length(head); err != nil {
				return nil, 0, err
			}
			for range max(n, 0) * per { // n < 0: RESP2 null array
				if raw, _, err = readValue(r, raw); err != nil {
					return nil, 0, err
				}
			}
		}
		if err != nil || kind != '|' {
			return raw, kind, err
		}
		// An attribute annotates the value that follows it.
		return readValue(r, raw)
	}
	return nil, 0, fmt.Errorf("%w: unknown type %q", errProtocol, kind)
}

func readStreamedString(r *bufio.Reader, raw []byte) ([]byte, error) {
	for {
		start := len(raw)
		var err error
		if raw, err = readLine(r, raw); err != nil {
			return nil, err
		}
		head := raw[start:]
		if head[0] != ';' {
			return nil, fmt.Errorf("%w: streamed string chunk %q", errProtocol, head)
		}
		n, err := length(head)
		if err != nil || n == 0 {
			return raw, err
		}
		if raw, err = readBulk(r, raw, n); err != nil {
			return nil, err
		}
	}
}

func readStreamedAggregate(r *bufio.Reader, raw []byte) ([]byte, error) {
	for {
		var kind byte
		var err error
		if raw, kind, err = readValue(r, raw); err != nil || kind == '.' {
			return raw, err
		}
	}
}

// readLine appends one RESP line, CRLF included, to raw. A line holds at
// least one byte before its CRLF.
func readLine(r *bufio.Reader, raw []byte) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		if len(raw) > 0 && errors.Is(err, io.EOF) {
			return nil, io.ErrUnexpectedEOF // the stream ended inside a value
		}
		return nil, lineError(r, line, err)
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line %q", errProtocol, line)
	}
	return append(raw, line...), nil
}

func lineError(r *bufio.Reader, partial []byte, err error) error {
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return fmt.Errorf("%w: line longer than %d bytes", errProtocol, r.Size())
	case errors.Is(err, io.EOF) && len(partial) > 0:
		return io.ErrUnexpectedEOF
	}
	return err
}

// readBulk appends n bytes and their CRLF to raw.
func readBulk(r *bufio.Reader, raw []byte, n int) ([]byte, error) {
	if n > maxBulk {
		return nil, fmt.Errorf("%w: bulk of %d bytes", errProtocol, n)
	}
	start := len(raw)
	raw = append(raw, make([]byte, n+2)...)
	if _, err := io.ReadFull(r, raw[start:]); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	if raw[len(raw)-2] != '\r' || raw[len(raw)-1] != '\n' {
		return nil, fmt.Errorf("%w: bulk of %d bytes not followed by CRLF", errProtocol, n)
	}
	return raw, nil
}

// length parses the number in a header line such as "*3\r\n" or "$-1\r\n".
func length(head []byte) (int, error) {
	n, err := strconv.Atoi(string(bytes.TrimRight(head[1:], "\r\n")))
	if err != nil {
		return 0, fmt.Errorf("%w: header %q", errProtocol, head)
	}
	return n, nil
}
