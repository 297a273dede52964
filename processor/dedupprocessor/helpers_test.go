package dedupprocessor

import (
	"fmt"
	"sort"

	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/claim"
	"github.com/otelcol-dedup/otelcol-dedup/processor/dedupprocessor/internal/digest"
)

func sortedKeys(keys []string) []string {
	sort.Strings(keys)
	return keys
}

func fmtAny(v any) string { return fmt.Sprintf("%v", v) }

// batchDigests returns the keyed records' digests of b, in walk order.
func batchDigests(b *claim.Batch) []digest.Digest {
	var ds []digest.Digest
	for at := range b.Len() {
		if d, ok := b.DigestAt(int32(at)); ok {
			ds = append(ds, d)
		}
	}
	return ds
}
