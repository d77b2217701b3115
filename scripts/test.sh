#!/usr/bin/env bash
# The project's test command, for developers and CI alike:
#
#   scripts/test.sh
#
# 1. vet and gofmt;
# 2. every package with the race detector, end-to-end tests on the embedded
#    broker (run as its own process so the pipeline and the broker can be
#    SIGKILLed);
# 3. the shipped image (scripts/image.sh) built and run with podman;
# 4. the integration suite again against real Apache Kafka (the shipped
#    image included, through testcontainers-go on podman): with
#    KAFKA_LOCAL=1 the suite starts, restarts and removes its own broker
#    through scripts/kafka-local.sh (Apache Kafka's Maven Central jars on
#    the machine's Java 17+; Maven fetches them once).
#
# Without Java or Maven, step 4 runs on Docker (testcontainers) if a Docker
# engine answers, else it is skipped with the reason, except under CI
# (CI=true), where skipping it is a failure. Set KAFKA_BOOTSTRAP to run step
# 4 against a cluster of your own instead (the broker-restart tests then
# skip: the cluster is not theirs to restart). docs/brokers.md has the rest.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

# integration/ is a module of its own (its test dependencies stay out of
# the pipeline's go.mod): every go command below runs in both.
step "go vet"
go vet ./...
(cd integration && go vet ./...)

step "gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
	echo "gofmt would change:"; echo "$unformatted"; exit 1
fi

step "unit tests and the embedded-broker suite (race detector)"
# The embedded broker here even where Docker answers: step 3 is for real
# brokers.
go test -race -count=1 -timeout 25m ./...
(cd integration && INTEGRATION_NO_DOCKER=1 go test -race -count=1 -timeout 25m ./...)

step "the shipped image"
# Built from the repository alone (scripts/image.sh, FROM scratch) and run:
# the quick start to exit 0, readiness, SIGTERM to exit 0. Podman and runc
# are installed when missing (root, apt-get); where no container engine can
# run the step is skipped with the reason, except under CI.
set +e
scripts/image-test.sh
rc=$?
set -e
case $rc in
0) ;;
3)
	if [ "${CI:-}" = true ]; then
		echo "the shipped image: no container engine can run here (CI=true: that is a failure)"
		exit 1
	fi
	echo "the shipped image: SKIPPED: no container engine can run here"
	;;
*) exit $rc ;;
esac

step "integration suite on real Apache Kafka"
# Run from the package directory, so that go test shows the suite's first
# line (the broker's kind, version and address) even when it passes.
real_suite() {
	local log rc
	log=$(mktemp)
	set +e
	(cd integration && env "$@" go test -count=1 -timeout 25m) 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	local broker
	broker=$(grep -m 1 '^integration: broker ' "$log" | sed 's/^integration: broker //' || true)
	rm -f "$log"
	if [ $rc -ne 0 ]; then
		echo "real-broker suite FAILED (${broker:-no broker})"
		exit $rc
	fi
	case $broker in
	kind=external* | kind=kafka-local* | kind=testcontainers*) ;;
	*)
		echo "real-broker suite FAILED: it ran on ${broker:-an unknown broker}, not on Apache Kafka"
		exit 1
		;;
	esac
	echo "real-broker suite passed on: $broker"
}

if [ -n "${KAFKA_BOOTSTRAP:-}" ]; then
	echo "using the cluster at KAFKA_BOOTSTRAP=$KAFKA_BOOTSTRAP"
	real_suite KAFKA_BOOTSTRAP="$KAFKA_BOOTSTRAP"
	exit 0
fi
# Check for Java and fetch the jars before the suite, so that missing
# prerequisites (exit 3) can be told from a failing test.
set +e
scripts/kafka-local.sh prepare
rc=$?
set -e
case $rc in
0)
	echo "Apache Kafka $(scripts/kafka-local.sh version), run by the suite (KAFKA_LOCAL=1)"
	real_suite KAFKA_LOCAL=1
	;;
3)
	if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
		echo "no Java 17+ or Maven (see above), but Docker answers: Apache Kafka in a container (testcontainers)"
		real_suite
	elif [ "${CI:-}" = "true" ]; then
		echo "real-broker suite FAILED: scripts/kafka-local.sh cannot run here (Java 17+ and Maven are needed; see above), and no Docker engine answers"
		exit 1
	else
		echo "real-broker suite SKIPPED: scripts/kafka-local.sh cannot run here (Java 17+ and Maven are needed; see above), and no Docker engine answers"
	fi
	;;
*)
	echo "real-broker suite FAILED: scripts/kafka-local.sh prepare exited $rc"
	exit 1
	;;
esac
