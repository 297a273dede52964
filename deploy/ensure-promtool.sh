#!/usr/bin/env bash
# Ensures promtool is installed, for the tests that check the Prometheus rules
# in deploy/prometheus/ (`promtool check rules`, `promtool test rules`) and the
# dashboard's queries. Idempotent: installs Debian's `prometheus` package, which
# ships /usr/bin/promtool, only if promtool is missing. It never starts, stops
# or configures a Prometheus server (the package's service is left alone).
set -euo pipefail

have() {
	command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ]
}

if have promtool; then
	echo "ensure-promtool: promtool already installed: $( (command -v promtool || echo /usr/bin/promtool) )"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-promtool: promtool missing and apt-get not available; install Prometheus' promtool (>= 2.42) by other means" >&2
	exit 1
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "ensure-promtool: not root and sudo not found; run as root: apt-get install prometheus" >&2
		exit 1
	fi
	sudo="sudo"
fi

echo "ensure-promtool: installing Debian's prometheus package (for /usr/bin/promtool) with apt-get"
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus
echo "ensure-promtool: installed $(/usr/bin/promtool --version 2>&1 | head -1)"
