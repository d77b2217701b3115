#!/bin/sh
# Builds the pipeline binary as it ships: static (no cgo; pebble's sstable
# compression, snappy by default, is pure Go either way), stripped, with
# the version from `git describe` (or $VERSION) and the commit and its time
# from the checkout.
#
#   scripts/build.sh [output]        # default: bin/pipeline
set -eu
cd "$(dirname "$0")/.."
out=${1:-bin/pipeline}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
CGO_ENABLED=0 go build -trimpath -buildvcs=true \
	-ldflags "-s -w -X github.com/pipeline-run/pipeline/cli.Version=$version" \
	-o "$out" ./cmd/pipeline
