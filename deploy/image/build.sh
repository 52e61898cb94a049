#!/bin/sh
# Builds the sandbox image FROM scratch with Debian's static busybox.
# Usage: deploy/image/build.sh [TAG]   (default shoal/sandbox:dev)
set -eu
tag=${1:-shoal/sandbox:dev}
bb=${BUSYBOX:-/bin/busybox}
if ! [ -x "$bb" ] || ! file_is_static=$("$bb" --help >/dev/null 2>&1 && echo yes) || [ "$file_is_static" != yes ]; then
	echo "build.sh: $bb is missing; install it with: apt-get install busybox-static" >&2
	exit 1
fi
if ldd "$bb" >/dev/null 2>&1; then
	echo "build.sh: $bb is dynamically linked; install Debian's busybox-static (not busybox)" >&2
	exit 1
fi
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$(dirname "$0")/Dockerfile" "$ctx/"
cp "$bb" "$ctx/busybox"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag"
