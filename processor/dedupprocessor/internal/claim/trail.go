package claim

import (
	"sort"
	"time"
)

// trail is what a batch keeps to trace its copies; the tiers fill its
// scratch.
type trail struct {
	sources []sourceSpan // one per resource, by the index of its first record
	copies  []Copy       // the copies found for the current call
	tally   []SourceTally
	claimed []int64         // the local tier's answer: when each holder claimed
	ages    []time.Duration // the shared tier's answer: each copy's age, or UnknownAge
}

// sourceSpan says that the records from verdict index from on (to the next
// span) came from the source name.
type sourceSpan struct {
	from int32
	name string
}

// Copy is one duplicate: its verdict index, what caught it, its age.
type Copy struct {
	At  int32
	By  CaughtBy
	Age time.Duration
}

// SourceTally is one source span's share of a call.
type SourceTally struct {
	Source          string
	Records, Copies int64
	MinAge, MaxAge  time.Duration // of the copies of known age; MinAge < 0: none
	Example         int32         // the verdict index of a copy with an identity, -1: none
}

// Source says that the records from the next one on (to the next call) come
// from the source name.
func (b *Batch) Source(name string) {
	b.trail.sources = append(b.trail.sources, sourceSpan{from: int32(len(b.verdicts)), name: name})
}

// HasSources reports whether the batch's records were given sources.
func (b *Batch) HasSources() bool { return len(b.trail.sources) > 0 }

// Copies are the copies found for the call accepted last.
func (b *Batch) Copies() []Copy { return b.trail.copies }

// reset empties the trail, keeping its arrays but no source's name (they
// point into the request).
func (tr *trail) reset() trail {
	clear(tr.sources)
	return trail{sources: tr.sources[:0], copies: tr.copies[:0], tally: tr.tally[:0], claimed: tr.claimed[:0], ages: tr.ages[:0]}
}

// spanOf is the index of the span holding the record at verdict index at: the
// last one starting at or before it (an empty resource's span is passed).
func (tr *trail) spanOf(at int32) int {
	i := sort.Search(len(tr.sources), func(i int) bool { return tr.sources[i].from > at }) - 1
	return max(i, 0)
}

// Tally counts the call's records and copies per source span. The first call
// holds every record but those left for later; the second, those alone.
func (b *Batch) Tally() []SourceTally {
	tr := &b.trail
	n := len(tr.sources)
	tr.tally = resized(tr.tally, n)
	for i, s := range tr.sources {
		tr.tally[i] = SourceTally{Source: s.name, MinAge: UnknownAge, Example: -1}
	}
	if len(b.second) > 0 {
		for _, at := range b.second {
			tr.tally[tr.spanOf(at)].Records++
		}
	} else {
		for i, s := range tr.sources {
			end := int32(len(b.verdicts))
			if i+1 < n {
				end = tr.sources[i+1].from
			}
			t := &tr.tally[i]
			t.Records = int64(end - s.from)
			if len(b.later) > 0 {
				for _, v := range b.verdicts[s.from:end] {
					if v == verdictLater {
						t.Records--
					}
				}
			}
		}
	}
	for _, c := range tr.copies {
		t := &tr.tally[tr.spanOf(c.At)]
		t.Copies++
		if c.Age >= 0 {
			if t.MinAge < 0 || c.Age < t.MinAge {
				t.MinAge = c.Age
			}
			t.MaxAge = max(t.MaxAge, c.Age)
		}
		if t.Example < 0 && c.By != ByElection {
			t.Example = c.At
		}
	}
	return tr.tally
}
