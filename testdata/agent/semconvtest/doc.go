// Package semconvtest is empty: only a test of contrib's journald operator
// (build tag integration) imports contrib's package of this path, and
// nothing of it is compiled into otelcol-agent. go mod tidy, which ocb runs,
// still resolves every import of the dependencies' tests, whatever their
// build tags.
package semconvtest
