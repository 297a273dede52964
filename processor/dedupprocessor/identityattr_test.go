package dedupprocessor

import (
	"regexp"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
)

// TestIdentityAttribute: with identity_attribute set, every delivered unit
// that has an identity carries it in hex; a marked copy carries its
// original's, distinct records differ, and a record without a key (passed
// by on_missing_key) gets none.
func TestIdentityAttribute(t *testing.T) {
	cfg := defaultConfig()
	cfg.Action = ActionMark
	cfg.IdentityAttribute = "dedup.id"
	cfg.Logs.Key = []string{`attributes["event.id"]`}
	sink := new(consumertest.LogsSink)
	h := newHarness(t, cfg, sink)
	ld := events(1, 2, 1)
	lrs := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	lrs.AppendEmpty().Body().SetStr("no event id")
	if err := h.consume(ld); err != nil {
		t.Fatal(err)
	}
	got := sink.AllLogs()[0].ResourceLogs().At(0).ScopeLogs().At(0).LogRecords()
	if got.Len() != 4 {
		t.Fatalf("delivered %d records, want 4 (action: mark)", got.Len())
	}
	id := func(lr plog.LogRecord) string {
		v, ok := lr.Attributes().Get("dedup.id")
		if !ok {
			return ""
		}
		return v.Str()
	}
	hex := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for i := range 3 {
		if !hex.MatchString(id(got.At(i))) {
			t.Errorf("record %d: dedup.id = %q, want 32 hex digits", i, id(got.At(i)))
		}
	}
	if id(got.At(0)) != id(got.At(2)) || id(got.At(0)) == id(got.At(1)) {
		t.Errorf("ids %q %q %q: want the copy's equal to its original's and the other record's different", id(got.At(0)), id(got.At(1)), id(got.At(2)))
	}
	if _, marked := got.At(2).Attributes().Get("dedup.duplicate"); !marked {
		t.Error("the copy is not marked")
	}
	if v := id(got.At(3)); v != "" {
		t.Errorf("a record without a key got dedup.id %q", v)
	}
}
