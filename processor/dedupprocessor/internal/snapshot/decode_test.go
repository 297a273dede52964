package snapshot

import "github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"

// decode, the tests' reader, checks b whole as Restore does, then calls fn
// for each entry live at now, in the order written, its expiry clamped to
// now+window. It returns the Meta and the number of entries passed to fn.
func decode(b []byte, fingerprint uint64, window, now int64, fn func(d digest.Digest, expires int64)) (Meta, int, error) {
	meta, entries, err := parse(b, fingerprint)
	if err != nil {
		return Meta{}, 0, err
	}
	limit := addSat(now, window)
	n := 0
	for e := range len(entries) / entryLen {
		d, expires := entryAt(entries, e)
		if expires = min(expires, limit); expires > now {
			fn(d, expires)
			n++
		}
	}
	return meta, n, nil
}
