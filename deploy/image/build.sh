#!/usr/bin/env bash
# Builds the sandbox image FROM scratch with Debian's static busybox.
# Nothing is pulled: the build context carries the static binary.
# Usage: deploy/image/build.sh [TAG]   (default shoal/sandbox:dev)
# BUSYBOX names another static busybox binary (default /bin/busybox).
set -euo pipefail
case "${1:-}" in
-h | --help)
	sed -n '2,5s/^# \{0,1\}//p' "$0"
	exit 0
	;;
esac
tag=${1:-shoal/sandbox:dev}
here=$(cd "$(dirname "$0")" && pwd)
bb=${BUSYBOX:-/bin/busybox}

# A static busybox runs on scratch; Debian's busybox package is dynamic.
static_busybox() { [ -x "$bb" ] && "$bb" true 2>/dev/null && ! ldd "$bb" >/dev/null 2>&1; }

if ! static_busybox; then
	if [ -n "${BUSYBOX:-}" ]; then
		echo "build.sh: BUSYBOX=$bb is not a static busybox binary" >&2
		exit 1
	fi
	# Root installs it (replacing a dynamic busybox); anyone else is told
	# the command.
	"$here/../apt-install.sh" busybox-static || exit 1
	static_busybox || { echo "build.sh: $bb is still not a static busybox after installing busybox-static" >&2; exit 1; }
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$here/Dockerfile" "$ctx/"
cp "$bb" "$ctx/busybox"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag"
