#!/usr/bin/env bash
# Ensures bin/systemd-journal-remote, with which the end-to-end tests write
# real journal files (from the journal export format on stdin) for the
# journald receiver to read with journalctl.
#
# Debian ships systemd-journal-remote as a package that depends on systemd of
# its own version: installing it can upgrade the machine's systemd. Instead,
# this downloads the .debs of systemd-journal-remote, the libsystemd-shared of
# the same version and libmicrohttpd12 with `apt-get download` and extracts
# them under bin/journal-remote/; bin/systemd-journal-remote is a wrapper that
# runs the extracted binary with the extracted libraries, so nothing of the
# system changes. It also installs Debian's systemd if journalctl is missing
# (the receiver runs journalctl). Idempotent: does nothing if the wrapper
# already runs.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
dir="$root/bin/journal-remote"
wrapper="$root/bin/systemd-journal-remote"

say() { echo "ensure-journal-remote: $*"; }
die() { echo "ensure-journal-remote: $*" >&2; exit 1; }

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	sudo="sudo"
fi
as_root() {
	if [ -n "$sudo" ] && ! command -v sudo >/dev/null 2>&1; then
		die "not root and sudo not found; run as root: $*"
	fi
	$sudo "$@"
}

if ! command -v journalctl >/dev/null 2>&1 && [ ! -x /usr/bin/journalctl ] && [ ! -x /bin/journalctl ]; then
	command -v apt-get >/dev/null 2>&1 || die "journalctl missing and apt-get not available; install systemd's journalctl by other means"
	say "journalctl missing: installing Debian's systemd with apt-get (the journald receiver runs journalctl)"
	as_root apt-get update
	as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd
fi

if [ -x "$wrapper" ] && v="$("$wrapper" --version 2>/dev/null | head -n1)" && [ -n "$v" ]; then
	say "bin/systemd-journal-remote already runs: $v"
	exit 0
fi

command -v apt-get >/dev/null 2>&1 || die "apt-get not available: bin/systemd-journal-remote is extracted from Debian's systemd-journal-remote package (bookworm or later)"
command -v dpkg-deb >/dev/null 2>&1 || die "dpkg-deb not available: bin/systemd-journal-remote is extracted from Debian's systemd-journal-remote package"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

download() {
	(cd "$work" && apt-get download "$@")
}

say "downloading systemd-journal-remote and libmicrohttpd12 with apt-get download"
if ! download systemd-journal-remote libmicrohttpd12; then
	say "download failed: refreshing the package lists with apt-get update"
	as_root apt-get update
	download systemd-journal-remote libmicrohttpd12 || die "apt-get download systemd-journal-remote libmicrohttpd12 failed"
fi
version="$(dpkg-deb -f "$work"/systemd-journal-remote_*.deb Version)"
say "downloading libsystemd-shared=$version (systemd-journal-remote needs its own version)"
download "libsystemd-shared=$version" || die "apt-get download libsystemd-shared=$version failed"

rm -rf "$dir"
mkdir -p "$dir"
for deb in "$work"/*.deb; do
	say "extracting $(basename "$deb") into bin/journal-remote"
	dpkg-deb -x "$deb" "$dir"
done

bin=""
for p in lib/systemd/systemd-journal-remote usr/lib/systemd/systemd-journal-remote; do
	if [ -x "$dir/$p" ]; then
		bin="$p"
		break
	fi
done
[ -n "$bin" ] || die "no systemd-journal-remote binary in the extracted packages"
micro="$(find "$dir" -name 'libmicrohttpd.so.12' | head -n1)"
shared="$(find "$dir" -name 'libsystemd-shared-*.so' | head -n1)"
[ -n "$micro" ] && [ -n "$shared" ] || die "libmicrohttpd.so.12 or libsystemd-shared-*.so missing from the extracted packages"
# Relative to bin/journal-remote.
microdir="$(dirname "${micro#"$dir"/}")"
shareddir="$(dirname "${shared#"$dir"/}")"

# Paths relative to the wrapper: bin/ moves with its checkout.
cat >"$wrapper" <<EOF
#!/bin/sh
# Written by scripts/ensure-journal-remote.sh: Debian's systemd-journal-remote
# $version with its own libsystemd-shared and libmicrohttpd, extracted under
# bin/journal-remote.
d="\$(dirname "\$0")/journal-remote"
LD_LIBRARY_PATH="\$d/$microdir:\$d/$shareddir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "\$d/$bin" "\$@"
EOF
chmod 0755 "$wrapper"

if missing="$(LD_LIBRARY_PATH="$dir/$microdir:$dir/$shareddir" ldd "$dir/$bin" | grep 'not found')"; then
	die "the extracted systemd-journal-remote misses libraries (install them with apt-get):
$missing"
fi
v="$("$wrapper" --version | head -n1)" || die "bin/systemd-journal-remote does not run"
say "bin/systemd-journal-remote runs: $v"
