//go:build !race

package main

// raceEnabled: see race_on.go (the RSS bound is checked only without -race).
const raceEnabled = false
