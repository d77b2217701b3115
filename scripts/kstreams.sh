#!/usr/bin/env bash
# kstreams.sh — build (once, cached) and run the benchmark's Kafka Streams
# application (bench/kstreams: run.pipeline.bench.KStreamsBench, Kafka
# Streams 4.4.0) with the machine's Java (17 or newer).
#
# Usage: scripts/kstreams.sh COMMAND [ARGS...]
#
#   prepare        check for Java and build the jar if it is not cached yet;
#                  prints nothing on stdout (exit 3 says what is missing).
#   jar            prepare, then print the jar's absolute path as the last
#                  line of stdout.
#   run ARGS...    prepare, then exec java -jar JAR ARGS... (the application's
#                  stdout and stderr are the script's; see below).
#
# The application's arguments (run with --help for the full list):
#   --bootstrap HOST:PORT --job pass|count|windowed-count --app-id ID
#   [--in TOPIC] [--out TOPIC] [--commit-interval-ms 1000] [--cache-max-bytes 0]
#   [--threads 1] [--state-dir DIR] [--linger-ms 50]
# Its stdout carries only the lines `running`, `first-record <unix nanos>` and
# `stopped` (after SIGTERM: a clean close, exit 0); a stream error prints
# `error <message>` on stderr and exits 1; bad arguments exit 2. Its logs
# (SLF4J simple, WARN) go to stderr.
#
# Exit codes: 0 ok; 1 failure (the mvn output is printed on stderr when the
# build fails); 2 usage; 3 prerequisites missing (java >= 17, or mvn when the
# jar is not cached yet) — callers may skip the Kafka Streams arm on 3.
#
# Environment:
#   KSTREAMS_CACHE       jar cache, reused across runs   [$HOME/.cache/pipeline-kstreams]
#   KSTREAMS_HEAP_OPTS   JVM heap options                [-Xms256m -Xmx1g]
#   KSTREAMS_JAVA_OPTS   more JVM options (e.g. -Dorg.slf4j.simpleLogger.defaultLogLevel=info) []
#   JAVA_HOME / KSTREAMS_JAVA   the java to use (KSTREAMS_JAVA wins) [java on PATH]
#
# The jar is $KSTREAMS_CACHE/<key>/kstreams-bench.jar, where <key> is the
# first 16 hex digits of the SHA-256 of bench/kstreams/pom.xml and every file
# under bench/kstreams/src: a change of the sources builds a new jar. It is
# built outside the work tree (nothing is written under bench/kstreams) in a
# temporary directory that is renamed into place with a .complete marker, so
# concurrent prepares do not clash.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT_DIR=$(cd "$SCRIPT_DIR/../bench/kstreams" && pwd)
POM="$PROJECT_DIR/pom.xml"
JAR_NAME=kstreams-bench.jar

CACHE_DIR=${KSTREAMS_CACHE:-${HOME:-/tmp}/.cache/pipeline-kstreams}
HEAP_OPTS=${KSTREAMS_HEAP_OPTS:--Xms256m -Xmx1g}
JAVA_OPTS=${KSTREAMS_JAVA_OPTS:-}

# Exit codes.
E_FAIL=1
E_USAGE=2
E_PREREQ=3

log() { printf 'kstreams: %s\n' "$*" >&2; }
die() { log "$*"; exit "$E_FAIL"; }
die_prereq() { log "$*"; exit "$E_PREREQ"; }

# --- java ----------------------------------------------------------------------

# shellcheck source=java.sh
source "$SCRIPT_DIR/java.sh"

# --- jar -----------------------------------------------------------------------

sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256sum | cut -d ' ' -f 1
	elif command -v shasum >/dev/null 2>&1; then
		shasum -a 256 | cut -d ' ' -f 1
	else
		die_prereq "neither sha256sum nor shasum found"
	fi
}

# The cache key: the hash of the pom and of every source file, each with its
# path relative to the project (so a rename counts), in a stable order.
source_key() {
	local f sum
	sum=$(
		cd "$PROJECT_DIR"
		{
			printf '%s\n' pom.xml
			find src -type f | LC_ALL=C sort
		} | while IFS= read -r f; do
			printf '%s\0' "$f"
			cat -- "$f"
			printf '\0'
		done | sha256
	)
	[[ $sum =~ ^[0-9a-f]{64}$ ]] || die "cannot hash the sources in $PROJECT_DIR"
	printf '%s\n' "${sum:0:16}"
}

KEY=""
JAR_DIR=""
JAR=""
set_paths() {
	KEY=$(source_key)
	JAR_DIR="$CACHE_DIR/$KEY"
	JAR="$JAR_DIR/$JAR_NAME"
}

# The jar directory counts as present only once it is complete: it is built in
# a temporary directory and renamed, and carries a .complete marker.
build_jar() {
	[[ -f $JAR_DIR/.complete && -f $JAR ]] && return 0
	command -v mvn >/dev/null 2>&1 ||
		die_prereq "mvn not found: it is needed once to build $JAR"
	mkdir -p "$CACHE_DIR"
	local tmp
	tmp=$(mktemp -d "$CACHE_DIR/.$KEY.XXXXXX")
	log "building $JAR (mvn package, the first build downloads Kafka Streams from Maven Central)"
	# Maven writes everything under kstreams.build.dir (the pom's build
	# directory), outside the work tree.
	if ! mvn -q -B -f "$POM" -DskipTests -Dkstreams.build.dir="$tmp/build" package \
		>"$tmp.log" 2>&1 </dev/null; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		die "mvn package failed for $POM"
	fi
	rm -f "$tmp.log"
	[[ -f $tmp/build/$JAR_NAME ]] || {
		rm -rf "$tmp"
		die "$JAR_NAME missing after mvn package"
	}
	mv "$tmp/build/$JAR_NAME" "$tmp/$JAR_NAME"
	rm -rf "$tmp/build"
	touch "$tmp/.complete"
	chmod 755 "$tmp" # mktemp made it private
	# Only complete directories are renamed into place, so one without the
	# marker is not another build's: remove it.
	[[ -f $JAR_DIR/.complete ]] || rm -rf "$JAR_DIR"
	if [[ ! -e $JAR_DIR ]] && mv "$tmp" "$JAR_DIR" 2>/dev/null; then
		# Had another prepare renamed its build into place in between, mv
		# moved ours into it: drop that copy.
		rm -rf "${JAR_DIR:?}/${tmp##*/}"
	else
		rm -rf "$tmp"
	fi
	# Otherwise another prepare built it at the same time.
	[[ -f $JAR_DIR/.complete && -f $JAR ]] || die "cannot move the jar into $JAR_DIR"
	log "built $JAR"
}

prepare() {
	find_java "${KSTREAMS_JAVA:-}" "Kafka Streams 4.4"
	set_paths
	build_jar
}

usage() {
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

case ${1:-} in
prepare)
	[[ $# -eq 1 ]] || { usage >&2; exit "$E_USAGE"; }
	prepare
	;;
jar)
	[[ $# -eq 1 ]] || { usage >&2; exit "$E_USAGE"; }
	prepare
	printf '%s\n' "$JAR"
	;;
run)
	shift
	prepare
	read -r -a heap <<<"$HEAP_OPTS"
	read -r -a extra <<<"$JAVA_OPTS"
	exec "$JAVA" ${heap[@]+"${heap[@]}"} ${extra[@]+"${extra[@]}"} -XX:+UseG1GC -Djava.awt.headless=true -jar "$JAR" "$@"
	;;
-h | --help | help) usage ;;
*)
	usage >&2
	exit "$E_USAGE"
	;;
esac
