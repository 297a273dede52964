//go:build race

package main

// raceEnabled: the race detector's shadow memory inflates the RSS, so the
// RSS bound is not checked under -race (the heap bound still is).
const raceEnabled = true
