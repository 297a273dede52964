#!/usr/bin/env bash
# Racing copies: two collectors of examples/fleet-redis.yaml share one Redis
# (standalone, or a Cluster of 3 masters) and receive the same stream at the
# same time, so every record reaches both while the other's copy is in
# flight. Prints one line: distinct records/s, the collectors' and Redis's
# CPU per distinct record, the waits for a copy in flight, refused attempts,
# and whether each record was let through once and dropped once (the
# collectors' own counters). Every process it starts is stopped by its PID.
#
#   scripts/racing.sh standalone|cluster [records] [batch]
#
# Needs bin/otelcol-dedup (make build; BIN picks another binary) and
# redis-server / redis-cli (make deps). It listens on 127.0.0.1 from
# RACING_PORT_BASE (27000): Redis on base to base+2 (Cluster bus base+100 to
# base+102), the collectors on base+10 to base+13 and base+20 to base+23.
set -euo pipefail

topology=${1:?usage: scripts/racing.sh standalone|cluster [records] [batch]}
records=${2:-200000}
batch=${3:-1000}
base=${RACING_PORT_BASE:-27000}
bin=${BIN:-bin/otelcol-dedup}
dir=$(mktemp -d)
pids=()
collectors=()
masters=("$base")

cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT

redis() { # port [extra redis-server flags...]
	local port=$1
	shift
	mkdir -p "$dir/$port"
	redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --dir "$dir/$port" "$@" \
		>"$dir/redis-$port.log" 2>&1 &
	pids+=($!)
	until redis-cli -p "$port" ping >/dev/null 2>&1; do
		kill -0 $! 2>/dev/null || { tail -3 "$dir/redis-$port.log" >&2; exit 1; }
		sleep 0.1
	done
}

case $topology in
standalone)
	redis "$base"
	;;
cluster)
	for i in 0 1 2; do redis $((base + i)) --cluster-enabled yes --cluster-config-file nodes.conf \
		--cluster-port $((base + 100 + i)); done
	redis-cli --cluster create 127.0.0.1:"$base" 127.0.0.1:$((base + 1)) 127.0.0.1:$((base + 2)) \
		--cluster-yes >"$dir/cluster.log"
	until redis-cli -p "$base" cluster info | grep -q 'cluster_state:ok'; do sleep 0.1; done
	masters=("$base" $((base + 1)) $((base + 2)))
	;;
*)
	echo "racing.sh: topology must be standalone or cluster" >&2
	exit 2
	;;
esac

for i in 1 2; do
	REDIS_ADDR=127.0.0.1:$base "$bin" --config examples/fleet-redis.yaml \
		--config "yaml:receivers::otlp::protocols: {grpc: {endpoint: 127.0.0.1:$((base + 10 * i))}, http: {endpoint: 127.0.0.1:$((base + 10 * i + 3))}}" \
		--config "yaml:extensions::health_check::endpoint: 127.0.0.1:$((base + 10 * i + 1))" \
		--config "yaml:service::telemetry::metrics::readers: [{pull: {exporter: {prometheus: {host: 127.0.0.1, port: $((base + 10 * i + 2)), without_units: true, without_type_suffix: true, without_scope_info: true}}}}]" \
		--config "yaml:exporters::nop: {}" \
		--config "yaml:service::pipelines::logs::exporters: [nop]" \
		--config "yaml:service::pipelines::traces::exporters: [nop]" \
		>"$dir/collector-$i.log" 2>&1 &
	pids+=($!)
	collectors+=($!)
	until curl -sf "127.0.0.1:$((base + 10 * i + 1))" >/dev/null; do
		kill -0 $! 2>/dev/null || { tail -3 "$dir/collector-$i.log" >&2; exit 1; }
		sleep 0.2
	done
done

# CPU seconds so far: the collectors' from /proc (utime + stime), Redis's from INFO.
cpu() {
	for p in "${collectors[@]}"; do awk -v hz="$(getconf CLK_TCK)" '{ print "c", ($14 + $15) / hz }' "/proc/$p/stat"; done
	for p in "${masters[@]}"; do redis-cli -p "$p" info cpu | tr -d '\r' | awk -F: '/^used_cpu_(sys|user):/ { print "r", $2 }'; done
}
cpu >"$dir/cpu-before"

# One sender sends each request to both collectors at the same moment.
go run ./cmd/dedupload -endpoint 127.0.0.1:$((base + 10)),127.0.0.1:$((base + 20)) -records "$records" \
	-batch "$batch" -duplicates 0 -senders 1 -seed 7 >"$dir/load.json"

counter() { # metric, label filter: the sum over both collectors
	for i in 1 2; do curl -s "127.0.0.1:$((base + 10 * i + 2))/metrics"; done |
		awk -v m="$1" -v o="$2" 'index($0, m "{") == 1 && index($0, o) { s += $NF } END { printf "%d", s }'
}
cpu >"$dir/cpu-after"
used() { # c or r: CPU µs per distinct record over the load
	awk -v k="$1" -v n="$records" 'FNR == NR && $1 == k { s -= $2 } FNR != NR && $1 == k { s += $2 } END { printf "%.2f", s * 1e6 / n }' \
		"$dir/cpu-before" "$dir/cpu-after"
}
unique=$(counter otelcol_processor_dedup_records 'outcome="unique"')
duplicate=$(counter otelcol_processor_dedup_records 'outcome="duplicate"')
waits=$(counter otelcol_processor_dedup_wait_duration_count '')
field() { grep -o "\"$1\":[0-9.e+-]*" "$dir/load.json" | cut -d: -f2; }
seconds=$(field seconds)
refused=$(($(field retries) + $(field errors)))
exact=no
[[ $unique == "$records" && $duplicate == "$records" ]] && exact=yes
printf '%s batch=%d: %.0f distinct records/s; CPU per distinct record: collectors %s µs, Redis %s µs; %d waits for a copy in flight, %d refused; unique %d, duplicate %d of %d each: exact %s\n' \
	"$topology" "$batch" "$(awk -v r="$records" -v s="$seconds" 'BEGIN { print r / s }')" "$(used c)" "$(used r)" \
	"$waits" "$refused" "$unique" "$duplicate" "$records" "$exact"
