#!/bin/sh
# Builds the shipped image from the repository alone (no registry pull): a
# FROM scratch image (Containerfile) holding the static binary of
# scripts/build.sh, the machine's CA certificates and a non-root user.
#
#   scripts/image.sh [tag]             # default: pipeline:latest
set -eu
cd "$(dirname "$0")/.."
tag=${1:-pipeline:latest}
. scripts/container-env.sh
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
mkdir -p "$ctx/rootfs/etc/ssl/certs" "$ctx/rootfs/etc/pipeline" "$ctx/rootfs/tmp" "$ctx/state"
scripts/build.sh "$ctx/rootfs/pipeline"
certs=/etc/ssl/certs/ca-certificates.crt
if [ ! -f "$certs" ]; then
	echo "image.sh: $certs is missing (apt-get install ca-certificates)" >&2
	exit 1
fi
cp "$certs" "$ctx/rootfs/etc/ssl/certs/ca-certificates.crt"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/var/lib/pipeline:/sbin/nologin\n' >"$ctx/rootfs/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' >"$ctx/rootfs/etc/group"
chmod 1777 "$ctx/rootfs/tmp"
format=""
[ "$container" = docker ] || format="--format docker" # OCI images have no HEALTHCHECK
$container build -q $format -t "$tag" -f Containerfile "$ctx" >/dev/null
echo "$tag"
