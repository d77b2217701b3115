#!/usr/bin/env bash
# Builds the shipped image (scripts/image.sh) and runs it: the quick start
# on its embedded broker to exit 0; then a longer run that must become ready
# (`pipeline health --ready` inside the container, as its HEALTHCHECK does)
# and exit 0 on SIGTERM within its grace period.
#
# Exit 3 when no container engine can run here (the caller decides whether
# that is a skip); 1 on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."
set +e
. scripts/container-env.sh
rc=$?
set -e
[ $rc -eq 0 ] || exit 3
tag=pipeline:test-$$
scripts/image.sh "$tag" >/dev/null
cleanup() { $container rm -f "${name:-none}" >/dev/null 2>&1 || true; $container rmi -f "$tag" >/dev/null 2>&1 || true; }
trap cleanup EXIT
port=$((20000 + $$ % 20000))
run=($container run --network=host -e PIPELINE_METRICS_LISTEN=127.0.0.1:$port -v "$PWD/examples/quickstart.yaml:/etc/pipeline/pipeline.yaml:ro")

echo "image: $($container run --rm "$tag" version 2>/dev/null)"
out=$("${run[@]}" --rm "$tag" 2>/dev/null)
grep -q '^summary: 20000 records in, 20000 out (8 dead letters)' <<<"$out" || { echo "image: the quick start in the image did not finish as expected:"; echo "$out" | tail -5; exit 1; }
echo "image: the quick start ran to exit 0 in the image"

# A feed long enough to stop mid-run.
long=$(mktemp)
sed 's/records: 20000/records: 2000000/; s/rate: 10000 /rate: 20000 /' examples/quickstart.yaml >"$long"
chmod 644 "$long"
name=pipeline-test-$$
$container run -d --name "$name" --network=host -e PIPELINE_METRICS_LISTEN=127.0.0.1:$port -v "$long:/etc/pipeline/pipeline.yaml:ro" "$tag" >/dev/null 2>&1
ready=""
for _ in $(seq 1 120); do
	if $container exec "$name" /pipeline health --ready >/dev/null 2>&1; then ready=yes; break; fi
	sleep 0.5
done
[ -n "$ready" ] || { echo "image: never ready"; $container logs "$name" 2>&1 | tail -20; exit 1; }
echo "image: ready (pipeline health --ready in the container)"
start=$(date +%s)
$container kill --signal TERM "$name" >/dev/null
code=$($container wait "$name" 2>/dev/null | tail -1)
took=$(($(date +%s) - start))
if [ "$code" != 0 ]; then
	echo "image: exit status $code after SIGTERM"; $container logs "$name" 2>&1 | tail -20; exit 1
fi
# The log is read once into a variable: `logs | grep -q` under pipefail
# fails whenever grep stops reading before the engine finished writing.
log=$($container logs "$name" 2>&1)
grep -q '^summary: .* 0 aborted' <<<"$log" || {
	echo "image: no clean stop in the log (a summary with 0 aborted checkpoints); its end:"
	grep -E '^summary: |level=(WARN|ERROR)|checkpoint aborted' <<<"$log" | tail -20
	tail -20 <<<"$log"
	exit 1
}
echo "image: SIGTERM: exit 0 after ${took}s"
rm -f "$long"
