#!/usr/bin/env bash
# test/start.sh start|stop: what `make start` and `make stop` run.
#
# start builds the extension (quietly: its output goes to
# tmp_start/build.log, shown when the build fails), installs it into a
# private copy of PostgreSQL 15 (test/pg_env.sh, as `make demo` does),
# starts a cluster with it preloaded and the embedded Kafka broker
# (test/mock_broker; or uses the broker named by KAFKA_BOOTSTRAP_SERVERS),
# leaves both running and prints how to connect.  Run again while they run,
# it says so and prints the same.  As root the server runs as user postgres
# (initdb refuses root), as anyone else as that user.
#
# stop stops exactly what start started (the server, the broker, and any
# other process whose program lies in the state directory) and removes its
# files.
#
# Where things are: a state directory below $TMPDIR (the server's user must
# be able to enter it, which a checkout in /root would not allow), and the
# checkout's tmp_start/ (git-ignored), which points to it:
#   tmp_start/state      the state directory's path
#   tmp_start/env        the file to source: PGHOST, PGPORT, PGUSER,
#                        PGDATABASE, KAFKA_BOOTSTRAP_SERVERS
#   tmp_start/build.log  the build's output
# In the state directory: inst/ (the private installation), pgdata/ (with
# server.log), sock/ (the server's Unix socket: it listens on no TCP port,
# so it cannot clash with another server), bin/mock_broker (a copy, so that
# stop finds the broker by its program) and the broker's files, and
# start.info (what stop and a second start read).

set -u
. "$(dirname "${BASH_SOURCE[0]}")/pg_env.sh"

POINTER=$STM_SRC/tmp_start

# The cluster's size (README, "Sizing workers"): background worker slots
# for streams, their parallel helpers and PostgreSQL's own.
START_STREAMS=16
START_HELPERS=16
START_PG_WORKERS=10		# max_parallel_workers (8) + logical replication (2)
START_WORKERS=$((2 + START_STREAMS + START_HELPERS + START_PG_WORKERS))

die()
{
	stm_err "$*"
	exit 1
}

# info KEY: a value that start wrote to start.info (empty when none).
info()
{
	sed -n "s/^$1=//p" "$STM_TMP/start.info" 2>/dev/null
}

# The state directory of an earlier start, if tmp_start points to one.
read_pointer()
{
	STM_TMP=
	[ -f "$POINTER/state" ] || return 1
	read -r STM_TMP <"$POINTER/state" || return 1
	# only ever a directory that start made: stop removes it
	case $STM_TMP in
		/*/streaming.??????) ;;
		*) die "$POINTER/state does not name a state directory of make start: $STM_TMP" ;;
	esac
	[ -f "$STM_TMP/start.info" ]
}

# True when process $1 runs the program $2.
runs()
{
	[ -n "$1" ] && [ "$(readlink "/proc/$1/exe" 2>/dev/null)" = "$2" ]
}

# True when the server and the broker of the state directory both run.
all_running()
{
	local pid

	STM_USER=$(info user)
	STM_BINDIR=$(info bindir)
	[ -n "$STM_USER" ] && [ -x "$STM_BINDIR/pg_ctl" ] || return 1
	stm_run "$STM_BINDIR/pg_ctl" -D "$STM_TMP/pgdata" status >/dev/null 2>&1 || return 1
	pid=$(info broker_pid)
	[ -z "$pid" ] || runs "$pid" "$STM_TMP/bin/mock_broker"
}

# What start prints, the first time and every time after.
report()
{
	local user sock bootstrap

	user=$(info user)
	sock=$STM_TMP/sock
	bootstrap=$(info bootstrap)
	cat <<-EOF

		Connect:      psql -h $sock -p 5432 -U $user -d postgres
		Kafka:        $bootstrap$([ -n "$(info broker_pid)" ] && echo " (the embedded mock broker)")
		Environment:  . $POINTER/env
		              (PGHOST, PGPORT, PGUSER, PGDATABASE, KAFKA_BOOTSTRAP_SERVERS)
		Server log:   $STM_TMP/pgdata/server.log
		Sized for $START_STREAMS streams and $START_HELPERS parallel helpers: streaming.max_workers = $START_STREAMS, max_worker_processes = $START_WORKERS.
		Stop both with: make stop
	EOF
}

# stop_all [quiet]: stop what the state directory's start started, remove it
# and the pointer.
stop_all()
{
	local pid

	STM_USER=$(info user)
	STM_BINDIR=$(info bindir)
	if [ -n "$STM_USER" ] && [ -x "$STM_BINDIR/pg_ctl" ] &&
		stm_run "$STM_BINDIR/pg_ctl" -D "$STM_TMP/pgdata" status >/dev/null 2>&1; then
		stm_run "$STM_BINDIR/pg_ctl" -D "$STM_TMP/pgdata" -m fast -w -t 60 stop >/dev/null
	fi
	pid=$(info broker_pid)
	if runs "$pid" "$STM_TMP/bin/mock_broker"; then
		MOCK_BROKER_PID=$pid KAFKA_MOCK_DIR=$(info broker_dir) kafka_stop
	fi
	# anything else whose program lies in the state directory, then its files
	stm_cleanup
	rm -rf "$POINTER"
}

cmd_start()
{
	local settings bootstrap broker_pid=

	# a reader that goes away (make start | head) must not leave half a start
	trap 'exit 141' PIPE
	if read_pointer; then
		if all_running; then
			echo "PostgreSQL and Kafka of make start are already running."
			report
			return 0
		fi
		echo "What an earlier make start started is no longer all running: starting anew."
		stop_all
	elif [ -f "$POINTER/state" ]; then
		rm -rf "$POINTER"
	fi

	mkdir -p "$POINTER" || exit 1
	printf 'Building the extension (log: %s) ... ' "$POINTER/build.log"
	if ! stm_make -C "$STM_SRC" all >"$POINTER/build.log" 2>&1; then
		echo "failed"
		tail -n 40 "$POINTER/build.log" >&2
		die "the build failed; its whole output is in $POINTER/build.log"
	fi
	echo "done"

	printf 'Starting PostgreSQL 15 with streaming preloaded ... '
	# the private installation; its clean-up trap stays set until all runs
	stm_setup || die "setup failed"
	settings="# make start: sized for streams and their helpers (README, \"Sizing workers\")
streaming.max_workers = $START_STREAMS
# 2 (the launcher, a discovery worker) + $START_STREAMS streams + $START_HELPERS helpers + $START_PG_WORKERS of PostgreSQL's own
max_worker_processes = $START_WORKERS
# results read the same on every machine
timezone = 'UTC'"
	stm_cluster_start "$STM_TMP/pgdata" "$STM_TMP/sock" "$settings" ||
		die "could not start PostgreSQL"
	echo "done (as user $STM_USER)"

	# a KAFKA_BOOTSTRAP_SERVERS that an earlier start's env file set is not
	# a broker of the user's
	if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ] &&
		[ "$KAFKA_BOOTSTRAP_SERVERS" = "${STREAMING_START_BOOTSTRAP:-}" ]; then
		unset KAFKA_BOOTSTRAP_SERVERS
	fi
	if [ -n "${KAFKA_BOOTSTRAP_SERVERS:-}" ]; then
		bootstrap=$KAFKA_BOOTSTRAP_SERVERS
		echo "Kafka: the broker KAFKA_BOOTSTRAP_SERVERS names, $bootstrap"
	else
		printf 'Starting the embedded Kafka broker ... '
		mkdir -p "$STM_TMP/bin" &&
			cp "$STM_SRC/test/mock_broker" "$STM_TMP/bin/mock_broker" ||
			die "no test/mock_broker (the build makes it)"
		# its files in the state directory too
		MOCK_BROKER=$STM_TMP/bin/mock_broker TMPDIR=$STM_TMP kafka_start ||
			die "could not start the Kafka broker"
		bootstrap=$BOOTSTRAP
		broker_pid=$MOCK_BROKER_PID
		echo "done"
	fi

	cat >"$STM_TMP/start.info" <<-EOF
		user=$STM_USER
		bindir=$STM_BINDIR
		bootstrap=$bootstrap
		broker_pid=$broker_pid
		broker_dir=${KAFKA_MOCK_DIR:-}
	EOF
	cat >"$POINTER/env" <<-EOF
		# make start's PostgreSQL and Kafka (make stop stops them); source it:
		#   . $POINTER/env
		export PGHOST='$STM_TMP/sock' PGPORT=5432 PGUSER='$STM_USER' PGDATABASE=postgres
		export KAFKA_BOOTSTRAP_SERVERS='$bootstrap' STREAMING_START_BOOTSTRAP='$bootstrap'
	EOF
	echo "$STM_TMP" >"$POINTER/state"
	# all is up: nothing of it goes when this script ends
	trap - EXIT HUP INT TERM PIPE
	echo
	echo "PostgreSQL and Kafka are running."
	report
}

cmd_stop()
{
	if ! read_pointer; then
		rm -rf "$POINTER"
		echo "Nothing to stop: make start's PostgreSQL and Kafka are not running."
		return 0
	fi
	local dir=$STM_TMP

	stop_all
	echo "Stopped make start's PostgreSQL and Kafka, and removed $dir."
}

case ${1:-} in
	start) cmd_start ;;
	stop) cmd_stop ;;
	*) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
