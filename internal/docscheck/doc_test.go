// Package docscheck keeps the operator documentation honest. Its tests (this
// package has no other code) check, against the real otelcol-dedup binary:
//
//   - every collector config in examples/ passes `otelcol-dedup validate`
//     with an empty environment, keeps "acknowledged means delivered" (no
//     batch processor after dedup, exporter queues that wait for the
//     result), and the ones that can run here deliver what their comments
//     promise;
//   - every YAML block of the Markdown docs (README.md, CHANGELOG.md, the
//     component README, docs/, examples/README.md, deploy/README.md) is
//     checked as printed, by the rule below;
//   - the ocb manifest of README.md builds a working collector from an empty
//     directory;
//   - README.md's facts agree with the repository (the Go release of the
//     go.mod files, the Makefile's targets, the pages of docs/, the cache's
//     sizing, links), and memory figures live in BENCHMARKS.md alone;
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
// # YAML blocks of the docs
//
// A reader copies a block as printed, so no block is completed silently
// before it is validated. Each ```yaml block is one of these, decided in
// this order:
//
//  1. Marked `<!-- docscheck: ocb -->` on the line before the fence: the
//     complete config of README's "Put dedup in your own collector",
//     validated as printed by the binary the README's ocb manifest builds
//     (the distribution has components that collector lacks).
//  2. An ocb manifest (`dist:` at the top): it must be
//     examples/ocb/builder-config.yaml from `dist:` on.
//  3. A Prometheus config (`scrape_configs:` at the top): checked as printed
//     by `promtool check config`.
//  4. A fragment: the paragraph right before it says so in visible text,
//     "A fragment, completed by [`FILE`](PATH)", naming a shipped config
//     (examples/, testdata/). It must pass `otelcol-dedup validate --config
//     FILE --config BLOCK`, the collector's own merge, which a reader can run
//     too. If the sentence goes on "in a collector that has the `TYPE`
//     exporter" (or receiver, processor, extension), the distribution must
//     refuse it for exactly that type, so the sentence cannot hide another
//     error. If it goes on ", run with `--feature-gates=GATES`", validate
//     runs with that flag.
//  5. Anything else must be a complete config: it passes validate as printed.
//
// Every config of 4 and 5 (merged, as `print-config` prints it) must keep
// "acknowledged means delivered". TestDocSnippetsValidate counts the blocks
// of each kind: a new block updates the count.
//
// The binary is $OTELCOL_DEDUP_BIN when set (`make test` sets it), else the
// one internal/e2e builds with ocb. Redis servers are real (processor/dedupprocessor/testkit/redistest).
package docscheck
