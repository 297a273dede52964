package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

const samplePath = "../../testdata/demo-logs.json"

// TestSampleIsGenerated: the shipped sample is exactly what the generator
// writes, so it can be regenerated and reviewed, never hand-edited.
func TestSampleIsGenerated(t *testing.T) {
	var want bytes.Buffer
	if err := generateSample(&want); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("%s differs from the generator's output; run: make demo-data", filepath.Clean(samplePath))
	}
}

// TestSampleShape: 1000 records in 20 requests, 300 of them repeats, some
// within their own request and some of an earlier one.
func TestSampleShape(t *testing.T) {
	f, err := os.Open(samplePath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := readSample(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.requests) != sampleRequests || st.records != sampleRecords || st.unique != sampleRecords-sampleDuplicates {
		t.Errorf("sample has %d requests, %d records, %d distinct; want %d, %d, %d",
			len(st.requests), st.records, st.unique, sampleRequests, sampleRecords, sampleRecords-sampleDuplicates)
	}
	// A repeat of a record already in its request counts there (tier
	// batch), whatever came before: the processor's rule.
	if st.dupSameReq != 124 || st.dupEarlier != 176 {
		t.Errorf("repeats: %d within a request, %d of an earlier one; want 124 and 176",
			st.dupSameReq, st.dupEarlier)
	}
	t.Logf("%d requests, %d records, %d distinct, %d repeats within a request, %d of an earlier one",
		len(st.requests), st.records, st.unique, st.dupSameReq, st.dupEarlier)
}
