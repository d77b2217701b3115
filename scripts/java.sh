# java.sh — sourced by scripts/kafka-local.sh and scripts/kstreams.sh: finds
# a Java 17 or newer. The caller defines die_prereq (exit 3 with a message).
#
# find_java OVERRIDE WHAT sets JAVA to OVERRIDE if it is set, else to
# $JAVA_HOME/bin/java, else to java on PATH, and checks its version; WHAT
# names what needs it, for the message.
find_java() {
	local override=$1 what=$2
	if [[ -n $override ]]; then
		JAVA=$override
	elif [[ -n ${JAVA_HOME:-} && -x $JAVA_HOME/bin/java ]]; then
		JAVA=$JAVA_HOME/bin/java
	else
		JAVA=$(command -v java 2>/dev/null) ||
			die_prereq "java not found (need Java 17 or newer): install a JDK or set JAVA_HOME"
	fi
	[[ -x $JAVA ]] || die_prereq "java not executable: $JAVA"
	local line major
	line=$("$JAVA" -version 2>&1 | grep -m 1 -Eo 'version "[^"]+"' || true)
	major=${line#version \"}
	major=${major%%\"*}
	if [[ $major == 1.* ]]; then
		major=${major#1.}
	fi
	major=${major%%[.+-]*}
	[[ $major =~ ^[0-9]+$ ]] || die_prereq "cannot tell the version of $JAVA (need Java 17 or newer)"
	((major >= 17)) || die_prereq "$JAVA is Java $major; $what needs Java 17 or newer"
}
