// Package docscheck keeps the operator documentation honest. Its tests (this
// package has no other code) check, against the real otelcol-dedup binary:
//
//   - every collector config in examples/ passes `otelcol-dedup validate`
//     with an empty environment, keeps "acknowledged means delivered" (no
//     batch processor after dedup, exporter queues that wait for the
//     result), and the ones that can run here deliver what their comments
//     promise;
//   - every YAML block of the Markdown docs (README.md,
//     processor/dedupprocessor/README.md, docs/, examples/README.md,
//     deploy/README.md, CHANGELOG.md) is checked, by the rule below;
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
// # YAML blocks of the docs
//
// Each ```yaml block is one of these, decided in this order:
//
//  1. Marked: the line before the fence is `<!-- docscheck: KIND ARG -->`.
//     `ocb`: the config of README's "Put dedup in your own collector",
//     validated by the binary the README's ocb manifest builds (only there:
//     the distribution has components that collector lacks). `needs X`: the
//     block needs component X, which the distribution does not carry (the
//     text around it says so); the distribution must refuse it for exactly
//     that type, so a mark cannot hide any other error. `prometheus`: a
//     Prometheus config, checked by `promtool check config`.
//  2. An ocb manifest (`dist:` at the top): it must be
//     examples/ocb/builder-config.yaml from `dist:` on.
//  3. A collector config or a fragment of one (`receivers`, `processors`,
//     `exporters`, `extensions` or `service` at the top). A fragment is
//     completed: an otlp receiver where it has none; a debug exporter, and
//     otlp_grpc and otlp_http ones where it has no exporter; memory_limiter
//     and batch processors where it does not define them; and, unless it
//     has its own pipelines, each dedup processor it defines in a logs, a
//     traces and a metrics pipeline of its own, exporting to debug. The
//     completed config must pass validate with an empty environment, and
//     its pipelines must keep "acknowledged means delivered".
//  4. A dedup processor's settings alone (every top-level key is a dedup
//     setting, e.g. `logs:`): completed as `processors: {dedup: BLOCK}`,
//     then as 3.
//
// Any other block fails TestDocSnippetsValidate, which also counts the
// blocks of each kind: a new block updates the count.
//
// The binary is $OTELCOL_DEDUP_BIN when set (`make test` sets it), else the
// one internal/e2e builds with ocb. Redis servers are real (internal/testkit/redistest).
package docscheck
