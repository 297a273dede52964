# otelcol-dedup: the dedup processor and the otelcol-dedup distribution.
#
#   make build   build the distribution with ocb: _build/otelcol-dedup, copied to bin/otelcol-dedup
#   make agent   build otelcol-agent, a collector of upstream modules only that the
#                end-to-end tests run in front of otelcol-dedup: bin/otelcol-agent
#   make run     build, then run it with testdata/default.yaml (OTLP on 127.0.0.1:4317/4318)
#   make demo    build, then send testdata/demo-logs.json through it and check what comes out
#   make test    go test of every package of the two modules, the end-to-end tests included
#                (builds both binaries while the processor's tests run)
#   make race    the processor module's tests under the race detector
#   make deps    install redis-server and redis-cli if missing (Debian's packages),
#                extract Debian's systemd-journal-remote into bin/ (it writes the journal
#                files the journald tests read) and Debian's promtool into bin/ (it checks
#                the rules, dashboards and Prometheus configs) (make test does it)
#   make bench   the performance targets: Go benchmarks with benchstat, the distribution end
#                to end against its pass-through, CPU and allocation profiles
#                (cmd/dedupbench, BENCHMARKS.md)
#   make soak    the processor's randomized fault test (TestFaults) on random seeds for
#                SOAK_TIME (default 10m, e.g. make soak SOAK_TIME=1h); prints the seed of
#                every failed run (rerun one with its -faults.seed), log in _build/soak.log
#   make lint    go vet and golangci-lint (.golangci.yml) over every module; golangci-lint
#                is pinned in internal/tools/go.mod (a module of its own, so that its
#                dependencies stay out of the others' go.mod) and built on first use
#   make clean   remove build output
#
# Needs only Go and the module proxy: ocb is pinned in go.mod (tool line) and
# runs as `go tool builder`. Both ocb builds compile without DWARF
# (-gcflags=all=-dwarf=false): ocb strips the binaries anyway (-ldflags
# "-s -w"), it saves about a tenth of the compile time, and the two builds
# keep sharing the packages they have in common.
#
# Two Go modules: the processor (processor/dedupprocessor, what users import
# into their own ocb builds, with only published modules in its go.mod), and
# the tooling at the root (load generator, benchmark driver, end-to-end
# tests), which requires the processor through a replace of the working tree.
# The tests' Redis harness and shared helpers are the processor module's
# testkit package, which both modules' tests import.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

GO ?= go
DIST := _build/otelcol-dedup
BIN := bin/otelcol-dedup
AGENT_MANIFEST := testdata/agent/builder-config.yaml
AGENT_DIST := _build/agent/otelcol-agent
AGENT_BIN := bin/otelcol-agent
CONFIG ?= testdata/default.yaml
TEST_TIMEOUT ?= 14m
TEST_FLAGS ?=

# The binary depends on the manifest, the module files and every non-test Go
# source of the repository (the processor is compiled in from the working
# tree through the manifest's replace): nothing changed, nothing rebuilt.
GO_SOURCES := $(shell find . -name '*.go' ! -name '*_test.go' ! -path './_build/*' ! -path './bin/*' ! -path './.git/*' ! -path '*/testdata/*')
PROCESSOR := processor/dedupprocessor
# The two modules, which make lint goes through.
MODULES := $(PROCESSOR) .

.PHONY: build agent run demo demo-data deps test race bench soak lint clean

build: $(BIN)

$(DIST): builder-config.yaml go.mod go.sum $(PROCESSOR)/go.mod $(PROCESSOR)/go.sum $(GO_SOURCES)
	@echo "ocb: building $(DIST) (cold: 3-5 minutes; after a source change: 10-40 s; nothing changed: 2 s)"
	@# TMPDIR: ocb makes an (unused) temp dir on every run; keep it in _build.
	@mkdir -p _build/.tmp; start=$$(date +%s); \
	TMPDIR=$(CURDIR)/_build/.tmp $(GO) tool builder --config builder-config.yaml --gcflags=all=-dwarf=false; \
	rm -rf _build/.tmp; \
	echo "ocb: built $(DIST) in $$(( $$(date +%s) - start ))s"
	@# go build leaves an up-to-date binary untouched: mark it fresh for make.
	@touch $@

$(BIN): $(DIST)
	@mkdir -p $(dir $@)
	cp $(DIST) $@

# The agent is made of upstream modules only (its manifest pins them), so it
# depends on nothing else of the repository but the ocb version in go.mod and
# the empty stand-in module its manifest replaces a test-only dependency with.
agent: $(AGENT_BIN)

$(AGENT_DIST): $(AGENT_MANIFEST) testdata/agent/semconvtest/go.mod go.mod go.sum
	@echo "ocb: building $(AGENT_DIST) (cold: many minutes, the Prometheus receiver's dependencies; warm: seconds)"
	@mkdir -p _build/.tmp-agent; start=$$(date +%s); \
	TMPDIR=$(CURDIR)/_build/.tmp-agent $(GO) tool builder --config $(AGENT_MANIFEST) --gcflags=all=-dwarf=false; \
	rm -rf _build/.tmp-agent; \
	echo "ocb: built $(AGENT_DIST) in $$(( $$(date +%s) - start ))s"
	@touch $@

$(AGENT_BIN): $(AGENT_DIST)
	@mkdir -p $(dir $@)
	cp $(AGENT_DIST) $@

run: build
	./$(BIN) --config $(CONFIG)

demo: build
	$(GO) run ./cmd/dedupload -demo -bin $(BIN) -config $(CONFIG) -data testdata/demo-logs.json

# Regenerates the demo sample (deterministic: the generator is
# cmd/dedupload's test, which checks the shipped file matches).
demo-data:
	$(GO) test ./cmd/dedupload -count=1 -run '^TestSampleIsGenerated$$' -update

# The end-to-end tests (internal/e2e) use the binaries built here
# (OTELCOL_DEDUP_BIN, OTELCOL_AGENT_BIN); run alone with go test they build
# them themselves.
# redis-server and redis-cli for the tests, from Debian's packages if missing
# (this needs root); systemd-journal-remote, extracted from Debian's package
# into bin/ without installing it (the package would pull in a systemd
# upgrade), for TestJournaldRereads (root only for an apt-get update, or to
# install systemd where journalctl is missing); promtool extracted from
# Debian's prometheus package into bin/ without installing it (the package
# would install and start a Prometheus server).
PROMTOOL := bin/promtool

deps:
	bash scripts/ensure-redis.sh
	bash scripts/ensure-journal-remote.sh
	bash scripts/ensure-promtool.sh

# The tests compile with the ocb builds' flags (-trimpath, no DWARF, no cgo:
# ocb sets CGO_ENABLED=0), so that they reuse the packages `make build`
# compiled instead of compiling the dependencies again
# (BENCHMARKS.md#cold-builds).
TEST_GOFLAGS := -trimpath -gcflags=all=-dwarf=false
TEST_ENV := CGO_ENABLED=0 OTELCOL_DEDUP_BIN=$(CURDIR)/$(BIN) OTELCOL_AGENT_BIN=$(CURDIR)/$(AGENT_BIN) PROMTOOL=$(CURDIR)/$(PROMTOOL)

# The two modules' tests run side by side, each module's output in
# _build/test-<module>.log, printed when it ends. The processor's tests
# start at once; they mostly wait on their Redis servers and fault windows,
# and in that time, at the lowest CPU priority, the ocb builds of the two
# binaries (output in _build/binaries.log, printed if a build fails) and the
# compile of the root module's tests run. Then the root module's tests run
# (end-to-end first: it mostly waits on its collectors), at normal priority.
# The race detector is `make race`'s (it compiles every dependency a second
# time, instrumented); .ci/run runs it after make test.
test: deps
	@mkdir -p _build; rm -f _build/test-*.log; \
	(cd $(PROCESSOR) && $(TEST_ENV) $(GO) test $(TEST_GOFLAGS) -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...) \
		>_build/test-processor.log 2>&1 & processor=$$!; \
	echo "go test: module $(PROCESSOR) (_build/test-processor.log)"; \
	{ nice -n 19 $(MAKE) --no-print-directory build agent && \
		$(TEST_ENV) nice -n 19 $(GO) test $(TEST_GOFLAGS) -count=1 -run '^$$' ./... >/dev/null; } >_build/binaries.log 2>&1 & builds=$$!; \
	echo "make build agent, and the root module's test compile, beside it (_build/binaries.log)"; \
	failed=""; \
	if wait $$builds; then \
		grep '^ocb: built' _build/binaries.log || true; \
		echo "go test: module . (_build/test-root.log)"; \
		$(TEST_ENV) $(GO) test $(TEST_GOFLAGS) -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./internal/e2e ./... \
			>_build/test-root.log 2>&1 || failed=" ."; \
	else \
		cat _build/binaries.log; echo "make build agent: FAILED"; failed=" ."; \
	fi; \
	wait $$processor || failed="$(PROCESSOR)$$failed"; \
	for log in _build/test-processor.log _build/test-root.log; do [ ! -f $$log ] || { echo "== $$log"; cat $$log; }; done; \
	if [ -n "$$failed" ]; then echo "go test: FAILED in module(s): $$failed"; exit 1; fi

# The processor module's tests under the race detector: its code runs in its
# tests' process, where the detector sees it (the root module's tests drive
# the built binaries, not race builds).
race: deps
	cd $(PROCESSOR) && $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(TEST_FLAGS) ./...

# The performance targets in one run (cmd/dedupbench; BENCHMARKS.md says how
# long at each scale), after a wait of at most BENCH_LOAD_WAIT for the
# machine's 1-minute load to drop below 1: the processor module's Go
# benchmarks (go test -bench, -count BENCH_COUNT, benchstat; the Redis key
# layout's memory per record at 10^7 records, once), BENCH_REPS
# rounds of the distribution end to end (pass-through, local tier, Redis tier
# on BENCH_RECORDS OTLP logs, 30% and 0% copies, every delivery checked
# against the load's ground truth, and redis-benchmark's SET NX PX on the
# same redis-server), and the collector's CPU and allocation profiles in
# each mode with the functions whose cost differs. Writes to _bench (git
# ignores it): table.md and profile.md, which BENCHMARKS.md records, and the
# raw output.
# BENCH_FLAGS adds flags, e.g. '-phases e2e' (go run ./cmd/dedupbench -h).
BENCH_COUNT ?= 6
BENCH_REPS ?= 3
BENCH_RECORDS ?= 1000000
BENCH_LOAD_WAIT ?= 10m
BENCH_FLAGS ?=

bench: build deps
	$(GO) run ./cmd/dedupbench -bin $(BIN) -out _bench -count $(BENCH_COUNT) -reps $(BENCH_REPS) -records $(BENCH_RECORDS) -load-wait $(BENCH_LOAD_WAIT) $(BENCH_FLAGS)

# The soak runs TestFaults's random seeds, half the time on each topology,
# each seed under both on_error settings, for logs and metrics; make test
# runs its fixed seeds. SOAK_TIMEOUT bounds the whole go test run (a run
# that hangs fails on its own after about a minute).
SOAK_TIME ?= 10m
SOAK_TIMEOUT ?= 24h

soak:
	@bash scripts/ensure-redis.sh
	@mkdir -p _build; log=$(CURDIR)/_build/soak.log; \
	echo "make soak: TestFaults on random seeds for $(SOAK_TIME) (log: _build/soak.log)"; \
	status=0; \
	(cd $(PROCESSOR) && $(GO) test -race -count=1 -v -timeout $(SOAK_TIMEOUT) -run '^TestFaults$$' . -faults.duration=$(SOAK_TIME)) >$$log 2>&1 || status=$$?; \
	passed=$$(grep -c -- '--- PASS: TestFaults/.*/seed=[0-9]*/' $$log || true); \
	failed=$$(grep -c '^faults: FAILED' $$log || true); \
	echo "make soak: $$passed runs passed, $$failed failed"; \
	grep '^faults: FAILED' $$log || true; \
	if [ $$status -ne 0 ] && [ $$failed -eq 0 ]; then tail -50 $$log; fi; \
	exit $$status

# `go tool -n` builds the pinned golangci-lint once (into the Go build cache)
# and prints its path; it then runs in each module's directory.
lint:
	@golangci=$$(cd internal/tools && $(GO) tool -n golangci-lint); \
	for m in $(MODULES); do \
		echo "lint: module $$m"; \
		(cd $$m && $(GO) vet ./... && $$golangci run --config $(CURDIR)/.golangci.yml ./...) || exit 1; \
	done

clean:
	rm -rf _build bin
