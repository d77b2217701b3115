#!/usr/bin/env bash
# kafka-local.sh — run a real single-node Apache Kafka broker (KRaft mode,
# combined broker + controller) on 127.0.0.1, from the Maven Central jars
# resolved by scripts/kafka/pom.xml, with the machine's Java (17 or newer).
#
# Usage: scripts/kafka-local.sh COMMAND
#
#   prepare   check for Java and fetch the jars if needed, start nothing
#             (exit 3 says what is missing, as start would).
#   start     fetch the jars if needed, format the data dir if it is new, start
#             the broker in the background and wait until it is ready; prints
#             the bootstrap address (127.0.0.1:PORT) as the last line of stdout.
#             If the broker is already running, only prints the address.
#   stop      SIGTERM, wait for a clean exit, SIGKILL if it takes too long.
#   kill      SIGKILL at once (a crash); the next start recovers the logs.
#   restart   stop, then start again keeping the data (topics, offsets, ...).
#   status    exit 0 if the broker is running, 1 if not.
#   version   print the Kafka version that is run.
#   address   print the bootstrap address.
#   clean     stop, then remove the data dir.
#
# Exit codes: 0 ok; 1 failure (the tail of the broker log is printed on stderr
# when start fails); 2 usage; 3 prerequisites missing (java >= 17, or mvn when
# the jars are not cached yet) — callers may skip real-broker tests on 3.
#
# Environment:
#   KAFKA_LOCAL_PORT                 broker (client) port          [19092]
#   KAFKA_LOCAL_CONTROLLER_PORT      KRaft controller port         [KAFKA_LOCAL_PORT + 1]
#   KAFKA_LOCAL_DIR                  state: data, logs, pid, config [/tmp/pipeline-kafka-local]
#   KAFKA_LOCAL_CACHE                jar cache, reused across runs  [$HOME/.cache/pipeline-kafka]
#   KAFKA_LOCAL_VERSION              Kafka version                  [kafka.version in scripts/kafka/pom.xml]
#   KAFKA_LOCAL_TXN_MAX_TIMEOUT_MS   broker transaction.max.timeout.ms [broker default, 900000]
#   KAFKA_LOCAL_EXTRA_PROPERTIES     extra server.properties lines ("key=value", one per line)
#   KAFKA_LOCAL_SECURITY_PROTOCOL    the client listener's protocol: PLAINTEXT or SASL_PLAINTEXT
#                                    (then give sasl.enabled.mechanisms, the listener's JAAS
#                                    config and any authorizer as extra properties) [PLAINTEXT]
#   KAFKA_LOCAL_HEAP_OPTS            JVM heap options              [-Xms256m -Xmx1g]
#   KAFKA_LOCAL_START_TIMEOUT        seconds to wait for readiness  [90]
#   KAFKA_LOCAL_STOP_TIMEOUT         seconds to wait after SIGTERM  [30]
#   KAFKA_LOCAL_LOG_LEVEL            broker log level               [INFO]
#   JAVA_HOME / KAFKA_LOCAL_JAVA     the java to use (KAFKA_LOCAL_JAVA wins) [java on PATH]
#
# Files in KAFKA_LOCAL_DIR: data/ (log.dirs), server.properties,
# log4j2.properties, broker.log (broker.log.1 is the previous run's),
# broker.pid, ports (the ports the data dir was formatted with).
#
# The settings in server.properties are fixed at every start; the ports are
# fixed when the data dir is formatted (the controller's address is stored in
# the metadata log): to change them, run `clean` first.

set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
POM="$SCRIPT_DIR/kafka/pom.xml"

HOST=127.0.0.1
PORT=${KAFKA_LOCAL_PORT:-19092}
CONTROLLER_PORT=${KAFKA_LOCAL_CONTROLLER_PORT:-$((PORT + 1))}
STATE_DIR=${KAFKA_LOCAL_DIR:-/tmp/pipeline-kafka-local}
CACHE_DIR=${KAFKA_LOCAL_CACHE:-${HOME:-/tmp}/.cache/pipeline-kafka}
HEAP_OPTS=${KAFKA_LOCAL_HEAP_OPTS:--Xms256m -Xmx1g}
START_TIMEOUT=${KAFKA_LOCAL_START_TIMEOUT:-90}
STOP_TIMEOUT=${KAFKA_LOCAL_STOP_TIMEOUT:-30}
LOG_LEVEL=${KAFKA_LOCAL_LOG_LEVEL:-INFO}
PROTOCOL=${KAFKA_LOCAL_SECURITY_PROTOCOL:-PLAINTEXT}
case $PROTOCOL in
PLAINTEXT | SASL_PLAINTEXT) ;;
*)
	printf 'kafka-local: KAFKA_LOCAL_SECURITY_PROTOCOL=%s: PLAINTEXT or SASL_PLAINTEXT\n' "$PROTOCOL" >&2
	exit 2
	;;
esac

DATA_DIR="$STATE_DIR/data"
PROPS="$STATE_DIR/server.properties"
LOG4J_PROPS="$STATE_DIR/log4j2.properties"
BROKER_LOG="$STATE_DIR/broker.log"
PID_FILE="$STATE_DIR/broker.pid"
PORTS_FILE="$STATE_DIR/ports"
MARKER="$STATE_DIR/.pipeline-kafka-local"

# Exit codes.
E_FAIL=1
E_USAGE=2
E_PREREQ=3

log() { printf 'kafka-local: %s\n' "$*" >&2; }
die() { log "$*"; exit "$E_FAIL"; }
die_prereq() { log "$*"; exit "$E_PREREQ"; }

address() { printf '%s:%s\n' "$HOST" "$PORT"; }

# --- version and jars --------------------------------------------------------

kafka_version() {
	if [[ -n ${KAFKA_LOCAL_VERSION:-} ]]; then
		printf '%s\n' "$KAFKA_LOCAL_VERSION"
		return
	fi
	local v
	v=$(sed -n 's:.*<kafka\.version>\(.*\)</kafka\.version>.*:\1:p' "$POM" | head -n 1)
	[[ -n $v ]] || die "cannot read kafka.version from $POM"
	printf '%s\n' "$v"
}

VERSION=$(kafka_version)
LIB_DIR="$CACHE_DIR/lib-$VERSION"

# The jar directory counts as present only once it is complete: it is filled
# in a temporary directory and renamed, and carries a .complete marker.
fetch_jars() {
	[[ -f $LIB_DIR/.complete ]] && return 0
	command -v mvn >/dev/null 2>&1 ||
		die_prereq "mvn not found: it is needed once to fetch the Kafka $VERSION jars into $LIB_DIR"
	mkdir -p "$CACHE_DIR"
	local tmp
	tmp=$(mktemp -d "$CACHE_DIR/.lib-$VERSION.XXXXXX")
	log "fetching Kafka $VERSION jars into $LIB_DIR"
	if ! mvn -q -B -f "$POM" -Dkafka.version="$VERSION" -Dkafka.lib.dir="$tmp" \
		dependency:copy-dependencies >"$tmp.log" 2>&1; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		die "mvn could not resolve org.apache.kafka:kafka_2.13:$VERSION"
	fi
	rm -f "$tmp.log"
	compgen -G "$tmp/kafka_2.13-$VERSION.jar" >/dev/null || {
		rm -rf "$tmp"
		die "kafka_2.13-$VERSION.jar missing after mvn dependency:copy-dependencies"
	}
	touch "$tmp/.complete"
	rm -rf "$LIB_DIR"
	mv "$tmp" "$LIB_DIR" 2>/dev/null || {
		# Another start fetched it at the same time.
		rm -rf "$tmp"
		[[ -f $LIB_DIR/.complete ]] || die "cannot move the jars into $LIB_DIR"
	}
}

# --- java ----------------------------------------------------------------------

# shellcheck source=java.sh
source "$SCRIPT_DIR/java.sh"

# --- process -------------------------------------------------------------------

# Prints the broker's pid if it is running (and is our broker), else nothing.
running_pid() {
	[[ -f $PID_FILE ]] || return 1
	local pid
	pid=$(<"$PID_FILE")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	is_zombie "$pid" && return 1
	if [[ -r /proc/$pid/cmdline ]]; then
		# Guard against a reused pid: the command line must name our config.
		tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$PROPS" || return 1
	fi
	printf '%s\n' "$pid"
}

port_open() {
	local port=$1
	if command -v timeout >/dev/null 2>&1; then
		timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$port" 2>/dev/null
	else
		(exec 3<>"/dev/tcp/$HOST/$port") 2>/dev/null
	fi
}

is_zombie() {
	[[ -r /proc/$1/stat ]] || return 1
	local stat
	stat=$(<"/proc/$1/stat")
	stat=${stat##*) }
	[[ ${stat:0:1} == Z ]]
}

wait_gone() {
	local pid=$1 deadline=$((SECONDS + $2))
	while kill -0 "$pid" 2>/dev/null && ! is_zombie "$pid"; do
		((SECONDS < deadline)) || return 1
		sleep 0.2
	done
}

# Serialises start/stop/kill/clean between concurrent callers.
take_lock() {
	if [[ ! -d $STATE_DIR ]]; then
		mkdir -p "$STATE_DIR"
		touch "$MARKER"
	fi
	if command -v flock >/dev/null 2>&1; then
		exec 9>"$STATE_DIR/.lock"
		flock -w 300 9 || die "timed out waiting for the lock on $STATE_DIR"
	fi
}

# --- configuration -------------------------------------------------------------

write_config() {
	mkdir -p "$DATA_DIR"
	{
		cat <<EOF
# Written by kafka-local.sh at every start; edits are overwritten.
process.roles=broker,controller
node.id=1
listeners=$PROTOCOL://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=$PROTOCOL://$HOST:$PORT
listener.security.protocol.map=$PROTOCOL:$PROTOCOL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=$PROTOCOL
controller.listener.names=CONTROLLER
controller.quorum.bootstrap.servers=$HOST:$CONTROLLER_PORT
log.dirs=$DATA_DIR

# Single node: every replication factor and ISR is 1.
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=5
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=5
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false

# After a crash (kill), the restarted broker can register only once the
# controller has expired its previous session: keep that short.
broker.heartbeat.interval.ms=1000
broker.session.timeout.ms=4000

# Small footprint.
num.network.threads=2
num.io.threads=4
log.segment.bytes=16777216
log.retention.check.interval.ms=60000
EOF
		if [[ -n ${KAFKA_LOCAL_TXN_MAX_TIMEOUT_MS:-} ]]; then
			printf 'transaction.max.timeout.ms=%s\n' "$KAFKA_LOCAL_TXN_MAX_TIMEOUT_MS"
		fi
		if [[ -n ${KAFKA_LOCAL_EXTRA_PROPERTIES:-} ]]; then
			printf '\n# KAFKA_LOCAL_EXTRA_PROPERTIES\n%s\n' "$KAFKA_LOCAL_EXTRA_PROPERTIES"
		fi
	} >"$PROPS"

	cat >"$LOG4J_PROPS" <<EOF
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = $LOG_LEVEL
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
EOF
}

# The java command line up to the main class.
java_cmd() {
	local -a heap
	read -r -a heap <<<"$HEAP_OPTS"
	JAVA_CMD=("$JAVA" "${heap[@]}" -XX:+UseG1GC -XX:MaxGCPauseMillis=20
		-Djava.awt.headless=true -Dlog4j2.configurationFile="$LOG4J_PROPS"
		-cp "$LIB_DIR/*")
}

# A Kafka Uuid: 16 random bytes, URL-safe base64 without padding, not
# starting with '-' (it would read as a command-line option).
random_cluster_id() {
	local id
	while :; do
		id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
		[[ $id == -* ]] || break
	done
	printf '%s\n' "$id"
}

format_if_needed() {
	if [[ -f $DATA_DIR/meta.properties ]]; then
		local formatted=""
		[[ -f $PORTS_FILE ]] && formatted=$(<"$PORTS_FILE")
		if [[ -n $formatted && $formatted != "$PORT $CONTROLLER_PORT" ]]; then
			die "$STATE_DIR was formatted for ports '$formatted' (broker controller), not '$PORT $CONTROLLER_PORT': run '$0 clean' first"
		fi
		return 0
	fi
	local id
	id=$(random_cluster_id)
	log "formatting $DATA_DIR (cluster id $id)"
	if ! "${JAVA_CMD[@]}" kafka.tools.StorageTool format --cluster-id "$id" --config "$PROPS" --standalone \
		>"$STATE_DIR/format.log" 2>&1; then
		cat "$STATE_DIR/format.log" >&2
		die "formatting $DATA_DIR failed"
	fi
	printf '%s %s\n' "$PORT" "$CONTROLLER_PORT" >"$PORTS_FILE"
}

# --- commands ------------------------------------------------------------------

cmd_start() {
	take_lock
	if running_pid >/dev/null; then
		address
		return 0
	fi
	rm -f "$PID_FILE"
	touch "$MARKER"
	find_java "${KAFKA_LOCAL_JAVA:-}" "Kafka $VERSION"
	fetch_jars
	java_cmd
	local p
	for p in "$PORT" "$CONTROLLER_PORT"; do
		if port_open "$p"; then
			die "port $HOST:$p is already in use by another process"
		fi
	done
	write_config
	format_if_needed

	[[ -f $BROKER_LOG ]] && mv -f "$BROKER_LOG" "$BROKER_LOG.1"
	log "starting Kafka $VERSION on $(address) (log: $BROKER_LOG)"
	local started=$SECONDS
	# The broker gets its own session (no terminal signals from the caller),
	# no stdin, and its output in the log file, so that `$(kafka-local.sh start)`
	# returns. The inner shell records its pid and then becomes the JVM.
	# The lock's descriptor (9) is closed so the broker does not hold it.
	local -a launcher=(nohup)
	command -v setsid >/dev/null 2>&1 && launcher=(setsid nohup)
	# shellcheck disable=SC2016 # $$ and $1 belong to the inner shell.
	"${launcher[@]}" sh -c 'echo $$ >"$1"; shift; exec "$@"' sh "$PID_FILE" \
		"${JAVA_CMD[@]}" kafka.Kafka "$PROPS" </dev/null >"$BROKER_LOG" 2>&1 9>&- &
	local launched=$!

	local deadline=$((SECONDS + START_TIMEOUT)) pid=""
	while :; do
		if [[ -z $pid ]]; then
			pid=$(running_pid || true)
			if [[ -z $pid ]] && ! kill -0 "$launched" 2>/dev/null; then
				fail_start "the broker exited during startup"
			fi
		elif ! kill -0 "$pid" 2>/dev/null || is_zombie "$pid"; then
			fail_start "the broker exited during startup"
		fi
		if [[ -n $pid ]] && grep -q 'Kafka Server started' "$BROKER_LOG" 2>/dev/null &&
			port_open "$PORT"; then
			break
		fi
		if ((SECONDS >= deadline)); then
			kill -KILL "${pid:-$launched}" 2>/dev/null || true
			fail_start "the broker was not ready after ${START_TIMEOUT}s (killed)"
		fi
		sleep 0.25
	done
	log "ready in $((SECONDS - started))s (pid $pid)"
	address
}

fail_start() {
	log "$1; last lines of $BROKER_LOG:"
	tail -n 40 "$BROKER_LOG" >&2 2>/dev/null || true
	rm -f "$PID_FILE"
	exit "$E_FAIL"
}

cmd_stop() {
	take_lock
	local pid
	if ! pid=$(running_pid); then
		rm -f "$PID_FILE"
		log "not running"
		return 0
	fi
	log "stopping pid $pid"
	kill -TERM "$pid" 2>/dev/null || true
	if ! wait_gone "$pid" "$STOP_TIMEOUT"; then
		log "still running after ${STOP_TIMEOUT}s: SIGKILL"
		kill -KILL "$pid" 2>/dev/null || true
		wait_gone "$pid" 10 || die "pid $pid does not exit"
	fi
	rm -f "$PID_FILE"
	log "stopped"
}

cmd_kill() {
	take_lock
	local pid
	if ! pid=$(running_pid); then
		rm -f "$PID_FILE"
		log "not running"
		return 0
	fi
	log "killing pid $pid"
	kill -KILL "$pid" 2>/dev/null || true
	wait_gone "$pid" 10 || die "pid $pid does not exit"
	rm -f "$PID_FILE"
}

cmd_status() {
	local pid
	if pid=$(running_pid); then
		printf 'running pid %s on %s (Kafka %s, dir %s)\n' "$pid" "$(address)" "$VERSION" "$STATE_DIR"
		return 0
	fi
	printf 'not running\n'
	return 1
}

cmd_clean() {
	[[ -d $STATE_DIR ]] || return 0
	# Only ever remove a directory this script made.
	[[ -f $MARKER ]] || die "$STATE_DIR was not made by kafka-local.sh; not removing it"
	cmd_stop
	rm -rf "$STATE_DIR"
	log "removed $STATE_DIR"
}

usage() {
	sed -n '2,/^$/{s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"
}

case ${1:-} in
prepare)
	find_java "${KAFKA_LOCAL_JAVA:-}" "Kafka $VERSION"
	fetch_jars
	log "Kafka $VERSION ready to run with $JAVA (jars in $LIB_DIR)"
	;;
start) cmd_start ;;
stop) cmd_stop ;;
kill) cmd_kill ;;
restart)
	cmd_stop
	exec 9>&- # release the lock for the start below
	cmd_start
	;;
status) cmd_status ;;
version) printf '%s\n' "$VERSION" ;;
address) address ;;
clean) cmd_clean ;;
-h | --help | help) usage ;;
*)
	usage >&2
	exit "$E_USAGE"
	;;
esac
