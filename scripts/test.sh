#!/usr/bin/env bash
# The project's test command, for developers and CI alike:
#
#   scripts/test.sh
#
# 1. vet and gofmt;
# 2. every package with the race detector, end-to-end tests on the embedded
#    broker (run as its own process so the pipeline can be SIGKILLed);
# 3. the integration suite again against real Apache Kafka, started from
#    Maven Central jars by scripts/kafka-local.sh (needs Java 17+ and Maven).
#
# Without Java or Maven step 3 is skipped with the reason, except under CI
# (CI=true), where skipping it is a failure. Set KAFKA_BOOTSTRAP to run step
# 3 against a cluster of your own instead.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "go vet"
go vet ./...

step "gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "unit tests and the embedded-broker suite (race detector)"
go test -race -count=1 -timeout 25m ./...

step "integration suite on real Apache Kafka"
if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then
	echo "using the cluster at KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP"
	go test -count=1 -timeout 25m ./integration/
	exit 0
fi
set +e
addr=$(scripts/kafka-local.sh start)
rc=$?
set -e
if [ $rc -ne 0 ]; then
	if [ $rc -eq 3 ] && [ "${CI:-}" != "true" ]; then
		echo "real-broker suite SKIPPED: scripts/kafka-local.sh cannot run here (Java 17+ and Maven are needed; see above)"
		exit 0
	fi
	echo "real-broker suite FAILED to start its broker (exit $rc)"
	exit 1
fi
trap 'scripts/kafka-local.sh stop >/dev/null 2>&1 || true' EXIT
echo "Apache Kafka $(scripts/kafka-local.sh version) at $addr"
KAFKA_BOOTSTRAP=$addr go test -count=1 -timeout 25m ./integration/
