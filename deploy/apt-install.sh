#!/usr/bin/env bash
# Installs Debian packages a build or test needs, when this runs as root on
# a machine with apt-get; otherwise prints the one command to run and fails.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: deploy/apt-install.sh PACKAGE...

As root with apt-get: apt-get update, then apt-get install -y PACKAGE...
Otherwise: prints the command that installs them and exits 1.
USAGE
}

case "${1:-}" in
-h | --help)
	usage
	exit 0
	;;
"" | -*)
	usage >&2
	exit 2
	;;
esac

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
	echo "missing: $*; install with: sudo apt-get install -y $*" >&2
	exit 1
fi
echo "installing Debian packages: $*" >&2
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
