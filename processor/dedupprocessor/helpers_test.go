package dedupprocessor

import (
	"fmt"
	"sort"
)

func sortedKeys(keys []string) []string {
	sort.Strings(keys)
	return keys
}

func fmtAny(v any) string { return fmt.Sprintf("%v", v) }
