# test/registry_env.sh -- a schema registry for test and demo scripts.  Source it:
#
#	. "$repo/test/registry_env.sh"
#	registry_start || exit 1
#	trap registry_stop EXIT
#	... $SCHEMA_REGISTRY is its URL ...
#
# If SCHEMA_REGISTRY_URL is set, that (real) registry is used: SCHEMA_REGISTRY
# is its URL and nothing is started.  Otherwise registry_start runs
# test/schema_registry.py (the Confluent REST subset that the extension uses,
# Python's standard library only) in the background, on a free port of
# 127.0.0.1, with its state in a temp dir, and exports SCHEMA_REGISTRY and
# SCHEMA_REGISTRY_PID.  registry_stop stops it (SIGTERM, then SIGKILL) if
# registry_start started it.  Call registry_start in the main shell, not in
# $(...).  Safe under "set -u" and "set -e" (functions return status).

_REGISTRY_ENV_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

registry_start()
{
	local dir i

	if [ -n "${SCHEMA_REGISTRY_URL:-}" ]; then
		export SCHEMA_REGISTRY=$SCHEMA_REGISTRY_URL
		return 0
	fi
	if [ -n "${SCHEMA_REGISTRY_PID:-}" ] && kill -0 "$SCHEMA_REGISTRY_PID" 2>/dev/null; then
		echo "registry_start: the schema registry already runs (pid $SCHEMA_REGISTRY_PID)" >&2
		return 1
	fi
	dir=$(mktemp -d "${TMPDIR:-/tmp}/schema_registry.XXXXXX") || return 1
	export SCHEMA_REGISTRY_DIR=$dir
	"$_REGISTRY_ENV_DIR/schema_registry.py" --state "$dir/state.json" \
		--url-file "$dir/url" --log "$dir/log" >/dev/null 2>"$dir/err" </dev/null &
	export SCHEMA_REGISTRY_PID=$!
	for ((i = 0; i < 200; i++)); do		# at most 10 s
		if [ -s "$dir/url" ]; then
			read -r SCHEMA_REGISTRY <"$dir/url" || true
			export SCHEMA_REGISTRY
			return 0
		fi
		kill -0 "$SCHEMA_REGISTRY_PID" 2>/dev/null || break
		sleep 0.05	# poll interval
	done
	echo "registry_start: the schema registry did not start:" >&2
	cat "$dir/err" >&2 || true
	registry_stop
	return 1
}

registry_stop()
{
	local pid=${SCHEMA_REGISTRY_PID:-} i

	if [ -n "$pid" ]; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 100; i++)); do		# at most 5 s
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.05	# poll interval
		done
		kill -KILL "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
		unset SCHEMA_REGISTRY_PID
	fi
	if [ -n "${SCHEMA_REGISTRY_DIR:-}" ]; then
		rm -rf "$SCHEMA_REGISTRY_DIR"
		unset SCHEMA_REGISTRY_DIR
	fi
	return 0
}
