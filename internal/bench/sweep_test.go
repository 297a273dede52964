package bench

import (
	"bytes"
	"testing"
)

func samplePoints() []SweepPoint {
	var pts []SweepPoint
	for _, k := range []string{KeyContent, KeyEventID} {
		for i, b := range []int{10, 1000} {
			for j, d := range []int{0, 30} {
				// records/s = (2 + i/2 + j/10) M
				rps := (2 + float64(i)/2 + float64(j)/10) * 1e6
				pts = append(pts, SweepPoint{Key: k, Batch: b, DupPct: d, Records: 1_000_000, Seconds: 1e6 / rps})
			}
		}
	}
	return pts
}

func TestWriteSweepCSV(t *testing.T) {
	pts := samplePoints()[:2]
	pts[1].TrialNs = []float64{480.25, 476.19, 470}
	var buf bytes.Buffer
	if err := WriteSweepCSV(&buf, pts); err != nil {
		t.Fatal(err)
	}
	want := "key,batch,dup_pct,records,seconds,records_per_s,ns_per_record,trials_ns_per_record\n" +
		"content,10,0,1000000,0.500000,2000000,500.0,\n" +
		"content,10,30,1000000,0.476190,2100000,476.2,480.2 476.2 470.0\n"
	if buf.String() != want {
		t.Fatalf("csv\n%s\nwant\n%s", buf.String(), want)
	}
}

func TestFormatSweep(t *testing.T) {
	pts := samplePoints()
	pts = pts[:len(pts)-1] // event.id, batch 1000, 30%: not reached
	want := "| key | batch | 0% duplicates | 30% duplicates |\n" +
		"| --- | ---: | ---: | ---: |\n" +
		"| content | 10 | 500 ns (2.00M/s) | 476 ns (2.10M/s) |\n" +
		"| content | 1000 | 400 ns (2.50M/s) | 385 ns (2.60M/s) |\n" +
		"| event.id | 10 | 500 ns (2.00M/s) | 476 ns (2.10M/s) |\n" +
		"| event.id | 1000 | 400 ns (2.50M/s) | - |\n"
	if got := FormatSweep(pts); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}
