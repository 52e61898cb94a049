#!/usr/bin/env bash
# Builds the egress sidecar image FROM scratch: the static shoal-egress-shim
# (CGO_ENABLED=0) and nothing else. Nothing is pulled from a registry.
set -euo pipefail

case "${1:-}" in
-h | --help)
	echo "Usage: deploy/egress/build.sh [TAG]   (default shoal/egress:dev; GO sets the go command)"
	exit 0
	;;
-*)
	echo "Usage: deploy/egress/build.sh [TAG]" >&2
	exit 2
	;;
esac
[ $# -le 1 ] || { echo "Usage: deploy/egress/build.sh [TAG]" >&2; exit 2; }

tag=${1:-shoal/egress:dev}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
go=${GO:-go}
command -v "$go" >/dev/null || { echo "build.sh: $go not found (Go 1.26 is needed; set GO to its path)" >&2; exit 1; }
command -v docker >/dev/null || { echo "build.sh: docker not found" >&2; exit 1; }

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
(cd "$root" && CGO_ENABLED=0 "$go" build -trimpath -ldflags "-s -w" -o "$ctx/shoal-egress-shim" ./cmd/shoal-egress-shim)
cp "$here/Dockerfile" "$ctx/"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "built $tag"
