# Sourced by scripts: sets $container to a podman (or docker) command that
# works here. Debian's podman needs runc, the cgroupfs manager and a
# containers.conf without default ulimits; it is installed when missing
# and we may (root, apt-get).
#
#   . scripts/container-env.sh && $container images
if [ "${PIPELINE_CONTAINER:-podman}" = docker ]; then
	container=docker
else
	if ! command -v podman >/dev/null 2>&1 || ! command -v runc >/dev/null 2>&1; then
		if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
			echo "container-env: installing podman and runc" >&2
			DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman runc >&2
		fi
	fi
	if ! command -v podman >/dev/null 2>&1; then
		echo "container-env: podman is not installed (apt-get install podman runc)" >&2
		return 3 2>/dev/null || exit 3
	fi
	PIPELINE_CONTAINER_DIR=${PIPELINE_CONTAINER_DIR:-${TMPDIR:-/tmp}/pipeline-containers}
	mkdir -p "$PIPELINE_CONTAINER_DIR"
	printf '[containers]\ndefault_ulimits = []\npids_limit = 0\n' >"$PIPELINE_CONTAINER_DIR/containers.conf"
	export CONTAINERS_CONF="$PIPELINE_CONTAINER_DIR/containers.conf"
	container="podman --runtime runc --cgroup-manager=cgroupfs"
fi
