package main

import "testing"

func TestFormatTable(t *testing.T) {
	rows := []Row{
		{Target: "1", Figure: "ns per record", Measured: "183 ns", Goal: "<= 200 ns", Verdict: Met},
		{Target: "3", Figure: "tier vs redis-benchmark", Measured: "72%", Goal: ">= 80%", Verdict: NotMet},
		{Target: "3", Figure: "server CPU", Measured: "2.3 µs", Verdict: Info},
		{Target: "4", Figure: "cpu ratio", Measured: "phase e2e not run", Goal: "<= 1.15x", Verdict: Failed},
	}
	want := "" +
		"| # | figure | measured | target | result |\n" +
		"| --- | --- | --- | --- | --- |\n" +
		"| 1 | ns per record | 183 ns | <= 200 ns | met |\n" +
		"| 3 | tier vs redis-benchmark | 72% | >= 80% | NOT MET |\n" +
		"| 3 | server CPU | 2.3 µs |  | - |\n" +
		"| 4 | cpu ratio | phase e2e not run | <= 1.15x | NOT MEASURED |\n" +
		"\n1 met, 1 not met, 1 not measured\n"
	if got := FormatTable(rows); got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

func TestRate(t *testing.T) {
	for v, want := range map[float64]string{
		5_000_000: "5.00M",
		2_507_195: "2.51M",
		403_456:   "403k",
		45_210:    "45.2k",
		950:       "950",
		12.5:      "12.5",
		0:         "0.00",
	} {
		if got := Rate(v); got != want {
			t.Errorf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
}
