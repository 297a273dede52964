package digest

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFormsRoundTrip(t *testing.T) {
	d := Digest{Hi: 0x0123456789abcdef, Lo: 0xfedcba9876543210}
	if b := d.Bytes(); b[0] != 0x01 || b[15] != 0x10 {
		t.Fatalf("Bytes() = %x", b)
	}
	if got := FromBytes(d.Bytes()); got != d {
		t.Fatalf("FromBytes(Bytes()) = %v, want %v", got, d)
	}
	if s := d.String(); s != "0123456789abcdeffedcba9876543210" {
		t.Fatalf("String() = %s", s)
	}
	if b := d.AppendBinary([]byte{9}); len(b) != 1+Size || b[1] != 0x01 || b[16] != 0x10 {
		t.Fatalf("AppendBinary = %x", b)
	}
	if Of([]byte("a")) == Of([]byte("b")) || Of(nil) == (Digest{}) {
		t.Fatal("Of: distinct inputs collide, or the empty input hashes to zero")
	}
}
