#!/usr/bin/env bash
# Builds the shoal node image FROM scratch: the static shoal and shoal-node
# binaries (CGO_ENABLED=0) and nothing else. Nothing is pulled from a registry.
set -euo pipefail

usage() {
	cat <<USAGE
Usage: deploy/node/build.sh [TAG]

Builds the node image TAG (default shoal/node:dev) from this checkout:
compiles static shoal and shoal-node binaries and runs docker build on a local context.

Environment:
  GO       the go command (default: go)
  VERSION  the version the binary reports and its node registers (default:
           git describe --tags --always --dirty, or dev outside git; make
           node-image passes the one make build stamps)
USAGE
}

case "${1:-}" in
-h | --help)
	usage
	exit 0
	;;
-*)
	usage >&2
	exit 2
	;;
esac
[ $# -le 1 ] || { usage >&2; exit 2; }

tag=${1:-shoal/node:dev}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
go=${GO:-go}
command -v "$go" >/dev/null || { echo "build.sh: $go not found (Go 1.26 is needed; set GO to its path)" >&2; exit 1; }
command -v docker >/dev/null || { echo "build.sh: docker not found" >&2; exit 1; }
version=${VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
for cmd in shoal shoal-node; do
	(cd "$root" && CGO_ENABLED=0 "$go" build -trimpath -tags urfave_cli_no_docs -ldflags "-s -w -X shoal/cli.Version=$version" -o "$ctx/$cmd" "./cmd/$cmd")
done
cp "$here/Dockerfile" "$ctx/"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag ($version)"
