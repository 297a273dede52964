// Package docscheck keeps the operator documentation honest. Its tests (this
// package has no other code) check, against the real otelcol-dedup binary:
//
//   - every collector config in examples/ passes `otelcol-dedup validate`
//     with an empty environment, and the ones that can run here deliver what
//     their comments promise;
//   - every collector YAML snippet in README.md and docs/ validates;
//   - the ocb manifest of README.md builds a working collector from an empty
//     directory;
//   - every metric and label that the Grafana dashboard and the Prometheus
//     rules in deploy/ use is one the binary really exports, and the rules
//     pass `promtool check rules` and their own `promtool test rules`;
//   - the Dockerfile builds what `make build` builds (the same manifest, ocb,
//     Go release and binary path; static; non-root; the ports its config
//     listens on), its build stage, run outside Docker on the context
//     .dockerignore lets through, yields a working binary, and the configs
//     of the image and of deploy/compose validate under the environment
//     they are given there.
//
// The binary is $OTELCOL_DEDUP_BIN when set (`make test` sets it), else the
// one internal/e2e builds with ocb. Redis servers are real (processor/dedupprocessor/redistest).
package docscheck
