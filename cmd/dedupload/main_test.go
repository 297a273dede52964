package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/otelcol-dedup/otelcol-dedup/internal/otlp"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newSink starts an OTLP sink; with reject, it refuses every request with
// HTTP 400 (gRPC InvalidArgument), which no exporter retries.
func newSink(t *testing.T, reject bool) *otlp.Sink {
	t.Helper()
	s, err := otlp.NewSink()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if reject {
		f := &otlp.Faults{}
		f.FailWith(status.Error(codes.InvalidArgument, "the sink refused the request"))
		f.FailNext(math.MaxInt)
		s.Gate = f.Gate
	}
	return s
}

func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

type summary struct {
	Sent, Unique, Duplicates, Requests, Retries, Errors, FailedRecords int64
	Seed                                                               uint64
	Seconds, RecordsPerSecond                                          float64
}

func parseSummary(t *testing.T, line string) summary {
	t.Helper()
	var raw map[string]any
	if err := json.Unmarshal([]byte(line), &raw); err != nil {
		t.Fatalf("summary %q: %v", line, err)
	}
	for _, k := range []string{"sent", "unique", "duplicates", "requests", "retries", "errors", "failed_records", "seconds", "records_per_second", "seed"} {
		if _, ok := raw[k]; !ok {
			t.Fatalf("summary %q lacks %q", line, k)
		}
	}
	var s summary
	s.Sent, s.Unique, s.Duplicates = int64(raw["sent"].(float64)), int64(raw["unique"].(float64)), int64(raw["duplicates"].(float64))
	s.Requests, s.Retries, s.Errors = int64(raw["requests"].(float64)), int64(raw["retries"].(float64)), int64(raw["errors"].(float64))
	s.FailedRecords, s.Seed = int64(raw["failed_records"].(float64)), uint64(raw["seed"].(float64))
	s.Seconds, s.RecordsPerSecond = raw["seconds"].(float64), raw["records_per_second"].(float64)
	return s
}

func TestPrintsOneJSONLine(t *testing.T) {
	s := newSink(t, false)
	code, out, errOut := runCLI(t, "-endpoint", s.GRPCEndpoint(), "-records", "1000", "-batch", "100",
		"-duplicates", "0.25", "-senders", "3", "-seed", "7")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	if strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "{") {
		t.Fatalf("stdout is not one JSON line: %q", out)
	}
	sum := parseSummary(t, strings.TrimSpace(out))
	if sum.Sent != 1000 || sum.Duplicates != 250 || sum.Unique != 750 || sum.Requests != 10 || sum.Errors != 0 || sum.Seed != 7 {
		t.Errorf("summary %+v", sum)
	}
	if s.LogRecordCount() != 1000 {
		t.Errorf("sink got %d records", s.LogRecordCount())
	}
}

// Without -seed a random seed is drawn and reported.
func TestRandomSeedReported(t *testing.T) {
	s := newSink(t, false)
	code, out, _ := runCLI(t, "-endpoint", s.GRPCEndpoint(), "-records", "300", "-batch", "100")
	sum := parseSummary(t, strings.TrimSpace(out))
	if code != 0 || sum.Duplicates != 90 || sum.Seed == 0 {
		t.Errorf("exit %d, summary %+v (a random seed must be reported)", code, sum)
	}
}

func TestExitStatusOnErrors(t *testing.T) {
	s := newSink(t, true)
	code, out, _ := runCLI(t, "-endpoint", s.GRPCEndpoint(), "-records", "200", "-batch", "100")
	sum := parseSummary(t, strings.TrimSpace(out))
	if code != 1 || sum.Errors != 2 || sum.FailedRecords != 200 || sum.Retries != 0 {
		t.Errorf("exit %d, summary %+v", code, sum)
	}
}

func TestInterrupted(t *testing.T) {
	s := newSink(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	code := run(ctx, []string{"-endpoint", s.GRPCEndpoint()}, &out, io.Discard)
	if code != exitInterrupted || !strings.Contains(out.String(), `"sent":0`) {
		t.Errorf("exit %d, stdout %q", code, out.String())
	}
}

func TestUsageErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-duplicates 1.5": "dedupload: duplicates must be in [0, 1) (a fraction of records)",
		"-records 0":      "dedupload: want flags only, and -records, -batch and -senders >= 1",
		"-batch 0":        "dedupload: want flags only, and -records, -batch and -senders >= 1",
		"extra-argument":  "dedupload: want flags only, and -records, -batch and -senders >= 1",
		"-no-such-flag":   "flag provided but not defined: -no-such-flag",
	} {
		code, out, errOut := runCLI(t, strings.Fields(args)...)
		if code != exitUsage || out != "" || !strings.HasPrefix(errOut, want+"\n") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want %q", args, code, out, errOut, want)
		}
	}
	if code, _, errOut := runCLI(t, "-h"); code != 0 || !strings.Contains(errOut, "-duplicates") {
		t.Errorf("-h: exit %d, %q", code, errOut)
	}
}
