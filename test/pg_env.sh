# test/pg_env.sh: the environment of `make test` and `make demo`, sourced
# by test/run-tests.sh and test/demo.sh (never run on its own).
#
# It gives them a private PostgreSQL installation, a user to run servers as,
# a Kafka broker, and one clean-up that stops all of it:
#
#   stm_setup            check prerequisites, make the temp dir, install the
#                        clean-up trap, make the private installation (of a
#                        build with $STM_BUILD_ARGS when set: make test's
#                        FAULT_INJECTION=1, in a clean copy of the sources)
#   stm_make_installation SRC DEST LOG [MAKE ARGS]   a private installation
#                        of the extension in SRC (the checkout, or an old
#                        release)
#   stm_run CMD...       run CMD as the server user (postgres when root)
#   stm_copy_checkout D  copy the checkout into D, owned by the server user
#   stm_make_vars V...   print "V=value" lines for Makefile variables
#   stm_cluster_start DATADIR SOCKDIR   initdb and start a throwaway server
#   stm_kafka_start      export BOOTSTRAP, KAFKA_BOOTSTRAP: $KAFKA_BOOTSTRAP_SERVERS, or
#                        start the embedded mock broker (test/kafka_env.sh)
#   stm_registry_start   export SCHEMA_REGISTRY: $SCHEMA_REGISTRY_URL, or start the
#                        test schema registry (test/registry_env.sh)
#   stm_cleanup          stop every process started here, remove the temp dir
#
# Why a private installation: `make install` into /usr needs root, and a
# second PostgreSQL tree cannot simply point at the system one, because
# PostgreSQL finds its share and lib directories relative to its own binary
# (after resolving symlinks).  So the Debian PostgreSQL 15 tree (bin, lib,
# share) is copied into $STM_INST with the same relative layout, and the
# extension is installed into the copy with `make install DESTDIR=$STM_INST`.
# Everything runs with $STM_BINDIR first on PATH.
#
# Why a server user: initdb refuses to run as root.  As root, servers and
# tests run as "postgres" (runuser) in directories that user owns; as a normal
# user they run as that user.
#
# Variables set by stm_setup:
#   STM_SRC     the checkout (the directory above test/)
#   STM_TMP     the temp dir; everything below it goes away in stm_cleanup
#   STM_INST    DESTDIR of the private installation
#   STM_BINDIR  its bin directory (initdb, postgres, pg_ctl, psql, pg_config)
#   STM_PGXS    the system's pgxs directory (pg_regress, Perl test modules)
#   STM_USER    the user that runs servers and tests

STM_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Absolute: the private bin directory, with a pg_config of its own, goes
# first on PATH.
PG_CONFIG=$(command -v "${PG_CONFIG:-pg_config}" || echo "${PG_CONFIG:-pg_config}")
STM_TMP=
STM_KAFKA_STARTED=
STM_REGISTRY_STARTED=

# The helpers that start the mock broker and create and fill topics, and
# the schema registry.
if [ -f "$STM_SRC/test/kafka_env.sh" ]; then
	. "$STM_SRC/test/kafka_env.sh"
fi
if [ -f "$STM_SRC/test/registry_env.sh" ]; then
	. "$STM_SRC/test/registry_env.sh"
fi

stm_err()
{
	echo "$(basename "$0"): $*" >&2
}

# stm_run CMD...: run CMD as $STM_USER, in the current directory (in
# $STM_TMP when that user may not enter it, e.g. a clone in /root: pg_ctl
# and initdb would complain that they cannot change back to it).
stm_run()
{
	if [ "$(id -u)" != 0 ]; then
		"$@"
	elif runuser -u "$STM_USER" -- test -x "$PWD"; then
		runuser -u "$STM_USER" -- "$@"
	else
		(cd "${STM_TMP:-/}" && runuser -u "$STM_USER" -- "$@")
	fi
}

# stm_make ARGS...: make, on its own: not a part of a calling make's
# jobserver (no warnings under make -j); command-line variables of the
# calling make reach the callers through the environment.
stm_make()
{
	env -u MAKEFLAGS -u MFLAGS make --no-print-directory PG_CONFIG="$PG_CONFIG" "$@"
}

# stm_make_vars VAR...: print VAR=value for each variable, as the Makefile
# (with PGXS included) defines it.  A calling make's command-line variables
# are not seen here; they are in the environment, which callers check first.
stm_make_vars()
{
	local v
	{
		echo 'stm-print-vars:'
		for v in "$@"; do
			printf '\t$(info %s=$(%s))\n' "$v" "$v"
		done
		printf '\t@:\n'
	} | stm_make -s -C "$STM_SRC" -f Makefile -f - stm-print-vars
}

# stm_setup: everything the callers need before they start anything.
stm_setup()
{
	local pgxs build

	umask 022
	export LANG=C.UTF-8
	unset LC_ALL LC_CTYPE LC_COLLATE LC_MESSAGES LC_NUMERIC LC_MONETARY \
		LC_TIME LANGUAGE

	if ! command -v "$PG_CONFIG" >/dev/null; then
		stm_err "pg_config not found (install postgresql-server-dev-15)"
		return 1
	fi
	pgxs=$("$PG_CONFIG" --pgxs) || return 1
	STM_PGXS=$(cd "$(dirname "$pgxs")/../.." && pwd)
	if [ ! -x "$STM_PGXS/src/test/regress/pg_regress" ]; then
		stm_err "no pg_regress in $STM_PGXS (install postgresql-server-dev-15)"
		return 1
	fi
	if [ "$(id -u)" = 0 ]; then
		STM_USER=postgres
		if ! id -u "$STM_USER" >/dev/null 2>&1; then
			stm_err "initdb refuses to run as root, and there is no user \"postgres\" to run it as (install postgresql-15, or run as a normal user)"
			return 1
		fi
	else
		STM_USER=$(id -un)
	fi

	STM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/streaming.XXXXXX") || return 1
	chmod 755 "$STM_TMP"
	trap stm_cleanup EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
	if ! stm_run test -x "$STM_TMP"; then
		stm_err "user $STM_USER cannot enter $STM_TMP (set TMPDIR to a directory it can)"
		return 1
	fi

	# The private installation, of this checkout (built apart, from its
	# sources only, when it needs other make arguments than the checkout's
	# own build).
	STM_INST=$STM_TMP/inst
	STM_BINDIR=$STM_INST$("$PG_CONFIG" --bindir)
	build=$STM_SRC
	if [ -n "${STM_BUILD_ARGS:-}" ]; then
		build=$STM_TMP/build
		mkdir -p "$build" &&
			tar -C "$STM_SRC" -cf - --exclude=./.git --exclude='*.o' --exclude='*.so' \
				--exclude='*.bc' --exclude=./tmp_check --exclude=./results \
				--exclude=./test/mock_broker . | tar -C "$build" -xf - || return 1
	fi
	# shellcheck disable=SC2086 # make arguments, one per word
	stm_make_installation "$build" "$STM_INST" "$STM_TMP/install.log" \
		${STM_BUILD_ARGS:-} || return 1
	export PATH="$STM_BINDIR:$PATH"
}

# stm_make_installation SRC DEST LOG: a private installation in DEST: a copy
# of the PostgreSQL tree (bin, lib, share, at DEST + their system paths) with
# the extension whose sources are in SRC installed into it by
# `make install DESTDIR=DEST` (its output in LOG).  test/old_version.sh
# makes one of an earlier release with it.
stm_make_installation()
{
	local src=$1 dest=$2 log=$3 d ext bindir
	shift 3

	# A copy of the PostgreSQL tree ...
	for d in "$("$PG_CONFIG" --bindir)" "$("$PG_CONFIG" --pkglibdir)" \
		"$("$PG_CONFIG" --sharedir)"; do
		mkdir -p "$(dirname "$dest$d")"
		cp -R --preserve=mode,timestamps "$d" "$dest$d" || return 1
	done
	bindir=$dest$("$PG_CONFIG" --bindir)

	# ... with the extension installed into it.
	if ! stm_make -C "$src" install DESTDIR="$dest" "$@" >"$log" 2>&1; then
		cat "$log" >&2
		stm_err "make install DESTDIR=$dest failed"
		return 1
	fi

	# The copy must look for extensions in itself, not in the system tree.
	ext=$(stm_make_vars EXTENSION | sed -n 's/^EXTENSION=//p')
	d=$("$bindir/pg_config" --sharedir)
	if [ "$d" != "$dest$("$PG_CONFIG" --sharedir)" ] ||
		[ ! -f "$d/extension/$ext.control" ] ||
		[ "$("$bindir/pg_config" --pkglibdir)" != "$dest$("$PG_CONFIG" --pkglibdir)" ]; then
		stm_err "the copy of PostgreSQL in $dest does not use its own share and lib directories"
		return 1
	fi
}

# stm_copy_checkout DIR: the checkout (without .git and test output) in DIR,
# writable by $STM_USER, so tests can run where that user can write.
stm_copy_checkout()
{
	mkdir -p "$1" || return 1
	tar -C "$STM_SRC" -cf - \
		--exclude=./.git --exclude=./tmp_check --exclude=./tmp_check_iso \
		--exclude=./results --exclude=./log --exclude=./test/isolation/results \
		--exclude=./output_iso --exclude=./tmp_install . |
		tar -C "$1" -xf - || return 1
	if [ "$(id -u)" = 0 ]; then
		chown -R "$STM_USER:" "$1" || return 1
	fi
}

# stm_cluster_start DATADIR SOCKDIR [SETTINGS]: initdb and start a server
# that listens only on a Unix socket in SOCKDIR (so the port cannot clash
# with anything), with the extension preloaded and SETTINGS (more
# postgresql.conf lines) added.  Connect as $STM_USER with
# psql -h SOCKDIR -p 5432 -U $STM_USER.
stm_cluster_start()
{
	mkdir -p "$1" "$2" || return 1
	[ "$(id -u)" = 0 ] && chown "$STM_USER:" "$1" "$2"
	if ! stm_run "$STM_BINDIR/initdb" -D "$1" -A trust -E UTF8 --no-locale \
		-N >"$STM_TMP/initdb.log" 2>&1; then
		cat "$STM_TMP/initdb.log" >&2
		stm_err "initdb failed"
		return 1
	fi
	cat >>"$1/postgresql.conf" <<-EOF
		listen_addresses = ''
		unix_socket_directories = '$2'
		port = 5432
		shared_preload_libraries = 'streaming'
	EOF
	[ -n "${3:-}" ] && printf '%s\n' "$3" >>"$1/postgresql.conf"
	if ! stm_run "$STM_BINDIR/pg_ctl" -D "$1" -l "$1/server.log" -w -t 60 \
		start >/dev/null; then
		tail -n 30 "$1/server.log" >&2
		stm_err "the server did not start"
		return 1
	fi
	# The running server, too, must load extensions from the copy.
	if [ "$("$STM_BINDIR/psql" -XAtq -h "$2" -p 5432 -U "$STM_USER" -d postgres \
		-c "SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'")" != \
		"$("$STM_BINDIR/pg_config" --pkglibdir)" ]; then
		stm_err "the server does not load extensions from $STM_INST"
		return 1
	fi
}

# stm_kafka_start: export BOOTSTRAP and KAFKA_BOOTSTRAP (the same address):
# the broker named by KAFKA_BOOTSTRAP_SERVERS, or else the embedded mock
# broker, started by kafka_start of test/kafka_env.sh.
stm_kafka_start()
{
	if declare -F kafka_start >/dev/null; then
		STM_KAFKA_STARTED=1
		kafka_start || return 1
		# kafka_env.sh may have set traps of its own: ours must stay.
		trap stm_cleanup EXIT
	elif [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
		BOOTSTRAP=$KAFKA_BOOTSTRAP_SERVERS
	else
		stm_err "no test/kafka_env.sh to start the mock broker with"
		return 1
	fi
	export BOOTSTRAP KAFKA_BOOTSTRAP=$BOOTSTRAP
}

# stm_registry_start: export SCHEMA_REGISTRY, the schema registry's URL: the
# one SCHEMA_REGISTRY_URL names, or else the test registry, started by
# registry_start of test/registry_env.sh (in $STM_TMP; stm_cleanup stops it).
stm_registry_start()
{
	if declare -F registry_start >/dev/null; then
		STM_REGISTRY_STARTED=1
		TMPDIR=${STM_TMP:-${TMPDIR:-/tmp}} registry_start || return 1
	elif [ -n "${SCHEMA_REGISTRY_URL:-}" ]; then
		export SCHEMA_REGISTRY=$SCHEMA_REGISTRY_URL
	else
		stm_err "no test/registry_env.sh to start the schema registry with"
		return 1
	fi
}

# stm_kill_ours: stop every process whose executable lies below $STM_TMP:
# the copied postgres (every server started here, whoever started it and
# whether or not it was stopped properly) and binaries of the copied checkout.
# Servers get SIGQUIT (immediate shutdown), anything else SIGTERM; whatever
# is still there after 10 seconds (polled) gets SIGKILL.
stm_kill_ours()
{
	local p exe i alive pids=()

	# one find, not a readlink per process: forks are slow on a busy machine
	while read -r p exe; do
		pids+=("${p#/proc/}")
		if [ "${exe##*/}" = postgres ]; then
			kill -QUIT "${p#/proc/}" 2>/dev/null
		else
			kill -TERM "${p#/proc/}" 2>/dev/null
		fi
	done < <(find /proc -mindepth 2 -maxdepth 2 -name exe -lname "$STM_TMP/*" \
		-printf '%h %l\n' 2>/dev/null)
	[ ${#pids[@]} -eq 0 ] && return 0
	for i in $(seq 100); do
		alive=
		for p in "${pids[@]}"; do
			# A zombie is as good as gone.
			grep -qs '^State:[[:space:]]*[^Z[:space:]]' "/proc/$p/status" && alive=1
		done
		[ -z "$alive" ] && return 0
		sleep 0.1	# poll interval
	done
	kill -KILL "${pids[@]}" 2>/dev/null
	return 0
}

# stm_cleanup: the EXIT trap; safe to call more than once.  Silent, so a
# caller's last line stays last.
stm_cleanup()
{
	if [ -n "$STM_KAFKA_STARTED" ]; then
		STM_KAFKA_STARTED=
		kafka_stop >/dev/null 2>&1
	fi
	if [ -n "$STM_REGISTRY_STARTED" ]; then
		STM_REGISTRY_STARTED=
		registry_stop >/dev/null 2>&1
	fi
	if [ -n "$STM_TMP" ] && [ -d "$STM_TMP" ]; then
		stm_kill_ours
		rm -rf "$STM_TMP"
	fi
	STM_TMP=
}
