#!/usr/bin/env bash
# Ensures bin/promtool, with which the tests check the Prometheus rules, their
# unit tests, the dashboard queries and the Prometheus configs of the docs.
#
# Debian's prometheus package carries promtool, but installing it would also
# install and start a Prometheus server. Instead, this downloads the .deb with
# `apt-get download` and extracts only usr/bin/promtool (a static Go binary)
# into bin/, so nothing of the system changes, and nothing is compiled.
# Idempotent: does nothing if bin/promtool already runs.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
tool="$root/bin/promtool"

say() { echo "ensure-promtool: $*"; }
die() { echo "ensure-promtool: $*" >&2; exit 1; }

if [ -x "$tool" ] && v="$("$tool" --version 2>/dev/null | head -n1)" && [ -n "$v" ]; then
	say "bin/promtool already runs: $v"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not available: bin/promtool is extracted from Debian's prometheus package (bookworm or later)"
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not available: bin/promtool is extracted from Debian's prometheus package"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

say "downloading Debian's prometheus package with apt-get download"
if ! (cd "$work" && apt-get download prometheus); then
	say "download failed: refreshing the package lists with apt-get update"
	if [ "$(id -u)" -eq 0 ]; then
		apt-get update
	else
		command -v sudo >/dev/null 2>&1 || die "not root and sudo not found; run as root: apt-get update"
		sudo apt-get update
	fi
	(cd "$work" && apt-get download prometheus) || die "apt-get download prometheus failed"
fi

dpkg-deb -x "$work"/prometheus_*.deb "$work/x"
[ -x "$work/x/usr/bin/promtool" ] || die "no usr/bin/promtool in Debian's prometheus package"
mkdir -p "$(dirname "$tool")"
cp "$work/x/usr/bin/promtool" "$tool"
v="$("$tool" --version | head -n1)" || die "bin/promtool does not run"
say "bin/promtool runs: $v"
