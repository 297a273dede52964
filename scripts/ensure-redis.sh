#!/usr/bin/env bash
# Ensures redis-server and redis-cli are installed for the tests, which start
# their own servers on free loopback ports. Idempotent: installs the Debian
# packages redis-server and redis-tools only if a binary is missing. It never
# starts, stops or reconfigures a system Redis service.
set -euo pipefail

have() {
	command -v "$1" >/dev/null 2>&1 || [ -x "/usr/bin/$1" ] || [ -x "/usr/sbin/$1" ]
}

if have redis-server && have redis-cli; then
	echo "ensure-redis: redis-server and redis-cli already installed: $(redis-server --version 2>/dev/null || /usr/bin/redis-server --version)"
	exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
	echo "ensure-redis: redis-server/redis-cli missing and apt-get not available; install Redis >= 7 (with TLS) by other means" >&2
	exit 1
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
	if ! command -v sudo >/dev/null 2>&1; then
		echo "ensure-redis: not root and sudo not found; run as root: apt-get install redis-server redis-tools" >&2
		exit 1
	fi
	sudo="sudo"
fi

echo "ensure-redis: installing redis-server and redis-tools with apt-get"
$sudo apt-get update
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends redis-server redis-tools
echo "ensure-redis: installed $(redis-server --version)"
