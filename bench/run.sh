#!/usr/bin/env bash
# bench/run.sh: what `make bench` runs (by hand, not in CI).
#
# Loads the same N JSON order records (~110 bytes each) three ways, in one
# run, on one private PostgreSQL 15 server (fsync on, shared_buffers 1GB,
# max_wal_size 4GB, the extension preloaded) and the embedded mock Kafka
# broker (test/mock_broker), each into its own table of the same shape
# (order_id bigint, user_id bigint, amount numeric(10,2), status text,
# event_time timestamptz, no indexes):
#
#   (1) the extension: stream "s", SELECT order_id, user_id, amount, status,
#       event_time FROM orders (a Kafka source on the topic), run by its
#       background worker; timed from create_stream(start => true) until
#       streaming.process_available('s', '10 minutes') returns; the worker's
#       peak RSS is VmHWM from /proc/<worker_pid>/status, read just before
#       streaming.stop();
#   (2) server-side COPY ... FROM '<file>' (FORMAT csv) of the same records;
#   (3) bench/python_loop.py: an exactly-once confluent_kafka + psycopg2
#       consumer (assign() from offsets kept in a table, COPY 50k-record
#       batches, upsert offsets, commit).
#
# and prints one table with records/s of each and the ratios stream/COPY and
# stream/python, the CPU time and peak RSS (VmHWM, which counts the shared
# buffers a process touched) of the processes doing the work, then the
# stream's batches and the server log's streaming lines.  Every table is
# checked to hold exactly the N records.
#
# The records are generated once (bench/gen_orders.py: JSON lines and the
# same records as CSV) and produced with kcat, each keyless record to a
# random partition; bench/topic_offsets.py then checks that every partition
# still starts at offset 0 (the mock keeps 5 MiB per partition and silently
# drops older data): if not, they are produced again lz4-compressed to a
# second topic, which is then used.
#
# Options:
#   --records N     records to generate (default 1000000)
#   --partitions P  partitions of the topic (default 32)
#   --perf          afterwards, run the stream once more (into another sink)
#                   under `perf record -g` and print the worker's top 25
#                   symbols (root only; installs linux-perf if missing)
#   --keep          keep the temp dir (data, server log, perf.data)
# (under make: make bench BENCH_RECORDS=N BENCH_PARTITIONS=P BENCH_PERF=1)
#
# As root it installs what is missing (apt-get: kcat python3-confluent-kafka
# python3-psycopg2, and linux-perf for --perf), runs `make install` in the
# checkout, and runs the server as user postgres.  Otherwise the extension
# must already be installed (sudo make install) and the packages present.
# Everything it starts (server, broker, perf) is stopped at exit, and its
# temp dir removed.

set -uo pipefail

# defaults from the environment, so that `make bench BENCH_RECORDS=100000` works
RECORDS=${BENCH_RECORDS:-1000000}
PARTITIONS=${BENCH_PARTITIONS:-32}
DO_PERF=${BENCH_PERF:-}
KEEP=

usage()
{
	sed -n '/^# Options:/,/^# (under make/p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--records=*) RECORDS=${1#*=}; shift ;;
		--partitions) PARTITIONS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--partitions=*) PARTITIONS=${1#*=}; shift ;;
		--perf) DO_PERF=1; shift ;;
		--keep) KEEP=1; shift ;;
		-h|--help) usage; exit 0 ;;
		*) echo "bench/run.sh: unknown argument \"$1\"" >&2; usage >&2; exit 2 ;;
	esac
done
case $RECORDS in ''|*[!0-9]*|0) echo "bench/run.sh: --records wants a positive integer" >&2; exit 2 ;; esac
case $PARTITIONS in ''|*[!0-9]*|0) echo "bench/run.sh: --partitions wants a positive integer" >&2; exit 2 ;; esac

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$BENCH/.." && pwd)
PG_CONFIG=${PG_CONFIG:-pg_config}
# Debian's python3 has the Debian packages; a pyenv or venv python3 on PATH may not.
PY=${PYTHON:-/usr/bin/python3}
[ -x "$PY" ] || PY=python3
TMP=
PGDATA_DIR=
BROKER_PID=
PERF_PID=
IS_ROOT=
[ "$(id -u)" = 0 ] && IS_ROOT=1

say() { printf '%s\n' "$*" >&2; }
die() { say "bench/run.sh: $*"; exit 1; }

# as_server CMD...: run CMD as the user that owns the server.
as_server()
{
	if [ -n "$IS_ROOT" ]; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

cleanup()
{
	set +e
	if [ -n "$PERF_PID" ]; then
		kill -INT "$PERF_PID" 2>/dev/null
		wait "$PERF_PID" 2>/dev/null
		PERF_PID=
	fi
	if [ -n "${LOCK_PID:-}" ]; then
		kill -TERM "$LOCK_PID" 2>/dev/null
		wait "$LOCK_PID" 2>/dev/null
		LOCK_PID=
	fi
	if [ -n "$PGDATA_DIR" ] && [ -f "$PGDATA_DIR/postmaster.pid" ]; then
		as_server "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -m immediate -w stop >/dev/null 2>&1
	fi
	PGDATA_DIR=
	if [ -n "$BROKER_PID" ]; then
		kill -TERM "$BROKER_PID" 2>/dev/null
		wait "$BROKER_PID" 2>/dev/null
		BROKER_PID=
	fi
	if [ -n "$TMP" ] && [ -d "$TMP" ]; then
		if [ -n "$KEEP" ]; then
			say "bench/run.sh: kept $TMP"
		else
			rm -rf "$TMP"
		fi
	fi
	TMP=
}
trap cleanup EXIT
trap 'exit 129' HUP
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- prerequisites ---------------------------------------------------------

need_pkgs=()
command -v kcat >/dev/null || need_pkgs+=(kcat)
"$PY" -c 'import confluent_kafka' 2>/dev/null || need_pkgs+=(python3-confluent-kafka)
"$PY" -c 'import psycopg2' 2>/dev/null || need_pkgs+=(python3-psycopg2)
[ -n "$DO_PERF" ] && ! command -v perf >/dev/null && need_pkgs+=(linux-perf)
if [ ${#need_pkgs[@]} -gt 0 ]; then
	if [ -n "$IS_ROOT" ] && command -v apt-get >/dev/null; then
		say "installing ${need_pkgs[*]}"
		PY=/usr/bin/python3
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}" >/dev/null ||
			die "apt-get install ${need_pkgs[*]} failed"
	else
		die "missing: ${need_pkgs[*]} (as root: apt-get install ${need_pkgs[*]})"
	fi
fi
if [ -n "$DO_PERF" ] && [ -z "$IS_ROOT" ]; then
	die "--perf needs root (perf record -a)"
fi

command -v "$PG_CONFIG" >/dev/null || die "pg_config not found (install postgresql-server-dev-15)"
PGBIN=$("$PG_CONFIG" --bindir)
case $("$PG_CONFIG" --version) in
	"PostgreSQL 15"*) ;;
	*) die "$PG_CONFIG is not PostgreSQL 15: $("$PG_CONFIG" --version)" ;;
esac
if [ -n "$IS_ROOT" ]; then
	id -u postgres >/dev/null 2>&1 ||
		die "initdb refuses to run as root and there is no user postgres (install postgresql-15)"
	say "make install in $SRC"
	env -u MAKEFLAGS -u MFLAGS make --no-print-directory -C "$SRC" install PG_CONFIG="$PG_CONFIG" >/tmp/streaming-bench-install.$$.log 2>&1 || {
		cat /tmp/streaming-bench-install.$$.log >&2
		rm -f /tmp/streaming-bench-install.$$.log
		die "make install failed"
	}
	rm -f /tmp/streaming-bench-install.$$.log
fi
[ -f "$("$PG_CONFIG" --sharedir)/extension/streaming.control" ] ||
	die "the extension is not installed (run make install in $SRC as root)"
if [ ! -x "$SRC/test/mock_broker" ]; then
	env -u MAKEFLAGS -u MFLAGS make --no-print-directory -C "$SRC" test/mock_broker >/dev/null ||
		die "could not build test/mock_broker"
fi

umask 022
export LANG=C.UTF-8
unset LC_ALL
TMP=$(mktemp -d "${TMPDIR:-/tmp}/streaming-bench.XXXXXX") || die "mktemp failed"
chmod 755 "$TMP"
mkdir -p "$TMP/data" "$TMP/sock" "$TMP/pgdata"
if [ -n "$IS_ROOT" ]; then
	chown postgres: "$TMP/sock" "$TMP/pgdata"
	as_server test -r "$TMP/data" || die "user postgres cannot read $TMP (set TMPDIR)"
fi
PORT=5432    # the socket is in $TMP/sock and there is no TCP listener
SOCK=$TMP/sock

# ---- data ------------------------------------------------------------------

say "generating $RECORDS records"
read -r _ JSON_BYTES AVG_LEN EXPECT_SUM < <("$PY" "$BENCH/gen_orders.py" "$RECORDS" \
	"$TMP/data/orders.jsonl" "$TMP/data/orders.csv") || die "gen_orders.py failed"
[ -n "$EXPECT_SUM" ] || die "gen_orders.py failed"

say "starting the mock broker"
"$SRC/test/mock_broker" --topic "orders:$PARTITIONS" --topic "orders_lz4:$PARTITIONS" \
	--bootstrap-file "$TMP/bootstrap" >"$TMP/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 100); do
	[ -s "$TMP/bootstrap" ] && break
	kill -0 "$BROKER_PID" 2>/dev/null || { cat "$TMP/broker.log" >&2; die "the mock broker exited"; }
	sleep 0.1
done
[ -s "$TMP/bootstrap" ] || die "the mock broker did not start"
BOOTSTRAP=$(head -n1 "$TMP/bootstrap")

# produce TOPIC [kcat options...]: produce the records, then check that the
# broker kept them all (low offset 0 everywhere, N records in all).
produce()
{
	local topic=$1 lo hi sum=0 bad=0 p
	shift
	# sticky.partitioning.linger.ms=0: each keyless record to a random
	# partition; the default (10 ms of records to one partition) fills some
	# partitions far more than others and past the mock's 5 MiB
	kcat -P -b "$BOOTSTRAP" -t "$topic" -X queue.buffering.max.messages=1000000 \
		-X linger.ms=50 -X sticky.partitioning.linger.ms=0 "$@" -l "$TMP/data/orders.jsonl" 2>"$TMP/kcat.log" ||
		{ cat "$TMP/kcat.log" >&2; return 1; }
	"$PY" "$BENCH/topic_offsets.py" "$BOOTSTRAP" "$topic" >"$TMP/offsets.$topic" || return 1
	while read -r p lo hi; do
		[ "$lo" = 0 ] || bad=$((bad + 1))
		sum=$((sum + hi - lo))
	done <"$TMP/offsets.$topic"
	if [ "$bad" -gt 0 ] || [ "$sum" != "$RECORDS" ]; then
		say "topic $topic: $bad partitions with low offset > 0, $sum of $RECORDS records kept (5 MiB per partition limit of the mock)"
		return 1
	fi
	return 0
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
TOPIC=orders
COMPRESSION=none
say "producing to $TOPIC ($PARTITIONS partitions)"
t0=$(date +%s.%N)
if ! produce orders; then
	TOPIC=orders_lz4
	COMPRESSION=lz4
	say "producing again, lz4-compressed, to $TOPIC"
	produce orders_lz4 -z lz4 || die "the broker did not keep all records even with lz4; use more --partitions"
fi
PRODUCE_SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
PER_PART=$(awk '{ n = $3 - $2; if (min == "" || n < min) min = n; if (n > max) max = n }
	END { printf "%d..%d", min, max }' "$TMP/offsets.$TOPIC")

# ---- server ----------------------------------------------------------------

say "starting PostgreSQL"
PGDATA_DIR=$TMP/pgdata
as_server "$PGBIN/initdb" -D "$PGDATA_DIR" -A trust -E UTF8 --no-locale -U postgres -N \
	>"$TMP/initdb.log" 2>&1 || { cat "$TMP/initdb.log" >&2; PGDATA_DIR=; die "initdb failed"; }
cat >>"$PGDATA_DIR/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$SOCK'
port = $PORT
shared_preload_libraries = 'streaming'
shared_buffers = 1GB
max_wal_size = 4GB
max_worker_processes = 16
streaming.max_workers = 4
streaming.log_batches = on
log_line_prefix = '%m [%p] %b '
EOF
as_server "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -l "$PGDATA_DIR/server.log" -w -t 60 start >/dev/null ||
	{ tail -n 30 "$PGDATA_DIR/server.log" >&2; die "the server did not start"; }

# psql_q ARGS...: psql on the private server, unaligned, no headers.
psql_q()
{
	"$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres -d postgres "$@"
}

COLS='order_id bigint, user_id bigint, amount numeric(10,2), status text, event_time timestamptz'
psql_q -v cols="$COLS" -v bootstrap="$BOOTSTRAP" -v topic="$TOPIC" <<'EOF' || die "setup failed"
CREATE EXTENSION streaming;
SELECT format('CREATE TABLE %I (%s)', t, :'cols') FROM unnest(ARRAY['orders_stream', 'orders_copy', 'orders_py', 'orders_perf']) t
\gexec
SELECT streaming.create_kafka_source('orders', :'bootstrap', topics => ARRAY[:'topic'],
    starting_offsets => 'earliest', columns => :'cols')
\g /dev/null
EOF

vmhwm_kb()
{
	awk '/^VmHWM:/ { print $2 }' "/proc/$1/status" 2>/dev/null
}

# cpu_secs PID: user + system CPU time of the process (all its threads)
cpu_secs()
{
	sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
		awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}

# run_stream NAME SINK: create and start the stream, wait for it to process
# everything; prints "seconds worker_pid vmhwm_kb cpu_seconds" (of the
# worker, read just before it is stopped).  Stops the stream.
run_stream()
{
	local name=$1 sink=$2 secs pid
	secs=$(psql_q -v name="$name" -v sink="$sink" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT streaming.create_stream(:'name',
    $$SELECT order_id, user_id, amount, status, event_time FROM orders$$,
    sink => :'sink', start => true)
\g /dev/null
SELECT streaming.process_available(:'name', '10 minutes')
\g /dev/null
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3);
EOF
	) || return 1
	pid=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = '$name'")
	if [ -n "$pid" ]; then
		echo "$secs $pid $(vmhwm_kb "$pid") $(cpu_secs "$pid")"
	else
		echo "$secs - - -"
	fi
	psql_q -c "SELECT streaming.stop('$name')" >/dev/null
}

# ---- (1) the extension -----------------------------------------------------

say "(1) stream"
B0=$(cpu_secs "$BROKER_PID")
read -r STREAM_SECS WORKER_PID WORKER_HWM WORKER_CPU < <(run_stream s orders_stream) ||
	{ tail -n 40 "$PGDATA_DIR/server.log" >&2; die "the stream run failed"; }
[ -n "${STREAM_SECS:-}" ] || { tail -n 40 "$PGDATA_DIR/server.log" >&2; die "the stream run failed"; }

B1=$(cpu_secs "$BROKER_PID")

# ---- (2) server-side COPY --------------------------------------------------

say "(2) COPY"
read -r COPY_SECS COPY_HWM COPY_CPU < <(psql_q -F ' ' -v csv="$TMP/data/orders.csv" -v hz="$(getconf CLK_TCK)" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
COPY orders_copy FROM :'csv' (FORMAT csv);
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+)'),
       (SELECT round((f[12]::bigint + f[13]::bigint) / :hz::numeric, 2)
        FROM string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f);
EOF
) || die "COPY failed"
[ -n "${COPY_SECS:-}" ] || die "COPY failed"

# ---- (3) the Python loop ---------------------------------------------------

say "(3) python_loop.py"
psql_q -c CHECKPOINT || die "CHECKPOINT failed"
B2=$(cpu_secs "$BROKER_PID")
read -r PY_ROWS PY_SECS _ PY_BATCHES PY_RSS_KB PY_BACKEND_KB PY_CPU PY_BACKEND_CPU < <("$PY" "$BENCH/python_loop.py" \
	--bootstrap "$BOOTSTRAP" --topic "$TOPIC" --table orders_py \
	--dsn "host=$SOCK port=$PORT user=postgres dbname=postgres") ||
	die "python_loop.py failed"
[ -n "${PY_SECS:-}" ] || die "python_loop.py failed"
B3=$(cpu_secs "$BROKER_PID")

# ---- checks ----------------------------------------------------------------

CHECKS=$(psql_q -F ' ' -v n="$RECORDS" -v sum="$EXPECT_SUM" <<'EOF'
SELECT t, count(*) = :n AND count(DISTINCT order_id) = :n AND sum(amount) = :sum
          AND min(order_id) = 1 AND max(order_id) = :n,
       count(*), sum(amount)
FROM (SELECT 'stream' t, order_id, amount FROM orders_stream
      UNION ALL SELECT 'copy', order_id, amount FROM orders_copy
      UNION ALL SELECT 'python', order_id, amount FROM orders_py) x
GROUP BY t ORDER BY t;
EOF
) || die "checking the tables failed"
CHECK_FAIL=$(awk '$2 != "t" { print $1 ": " $3 " rows, sum " $4 }' <<<"$CHECKS")
# the stream's exact contents against COPY's (same records, same types)
DIFF_ROWS=$(psql_q -c "SELECT count(*) FROM ((TABLE orders_stream EXCEPT ALL TABLE orders_copy) UNION ALL (TABLE orders_copy EXCEPT ALL TABLE orders_stream)) d")

PROGRESS=$(psql_q -F ' | ' -P footer=off <<'EOF'
SELECT batch_id, num_input_rows, num_bad_rows, duration,
       round(processed_rows_per_second) AS rows_per_s
FROM streaming.progress WHERE stream = 's' ORDER BY batch_id;
EOF
)
STREAM_STATE=$(psql_q -F ' | ' -c "SELECT status, last_batch_id, coalesce(last_error, '-'), coalesce(source_error, '-') FROM streaming.stream_defs WHERE name = 's'")
DEAD=$(psql_q -c "SELECT count(*) FROM streaming.dead_letters")

# ---- optional: perf profile of the worker ----------------------------------

# The worker's pid exists only once the stream runs, so the stream is started
# while another session holds its sink locked: the worker's first batch
# waits for that lock (before it fetches anything), perf attaches to the
# worker (perf record -g -p), then the lock is let go.
PERF_OUT=
LOCK_PID=
if [ -n "$DO_PERF" ]; then
	say "(perf) stream again under perf record -p <worker>"
	psql_q -c "SELECT streaming.create_stream('s_perf',
		\$\$SELECT order_id, user_id, amount, status, event_time FROM orders\$\$,
		sink => 'orders_perf', start => false)" -c CHECKPOINT >/dev/null || die "create_stream s_perf failed"
	PGAPPNAME=bench-lock psql_q -c "BEGIN; LOCK TABLE orders_perf; SELECT pg_sleep(600)" \
		>/dev/null 2>&1 &
	LOCK_PID=$!
	q_wait()  # q_wait SQL: poll until SQL returns t (10 s)
	{
		local i
		for i in $(seq 200); do
			[ "$(psql_q -c "$1")" = t ] && return 0
			sleep 0.05
		done
		return 1
	}
	q_wait "SELECT count(*) > 0 FROM pg_stat_activity WHERE application_name = 'bench-lock' AND wait_event = 'PgSleep'" ||
		die "could not lock orders_perf"
	psql_q -c "SELECT streaming.start('s_perf')" >/dev/null || die "start s_perf failed"
	q_wait "SELECT count(*) > 0 FROM pg_stat_activity a JOIN streaming.streams s ON a.pid = s.worker_pid
		WHERE s.name = 's_perf' AND a.wait_event_type = 'Lock'" ||
		die "the worker of s_perf did not start (or did not wait for its sink)"
	PERF_WORKER=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = 's_perf'")
	perf record -g -F 999 -p "$PERF_WORKER" -o "$TMP/perf.data" >"$TMP/perf-record.log" 2>&1 &
	PERF_PID=$!
	sleep 1
	kill -0 "$PERF_PID" 2>/dev/null || { cat "$TMP/perf-record.log" >&2; die "perf record failed"; }
	psql_q -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench-lock'" >/dev/null
	wait "$LOCK_PID"
	LOCK_PID=
	PERF_SECS=$(psql_q <<'EOF'
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT streaming.process_available('s_perf', '10 minutes')
\g /dev/null
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3);
EOF
	) || die "the perf stream run failed"
	kill -INT "$PERF_PID"
	wait "$PERF_PID"
	PERF_PID=
	psql_q -c "SELECT streaming.stop('s_perf')" >/dev/null
	REPORT=(perf report -i "$TMP/perf.data" --stdio --no-children -g none)
	PERF_SAMPLES=$("${REPORT[@]}" --sort pid 2>/dev/null | sed -n 's/^# Samples: \([^ ]*\) .*/\1/p' | head -1)
	PERF_THREADS=$("${REPORT[@]}" --sort pid 2>/dev/null | grep -v '^#' | grep -v '^$' | head -10)
	PERF_TOP=$("${REPORT[@]}" --sort dso,symbol 2>/dev/null | grep -v '^#' | grep -v '^$' |
		sed 's/[[:space:]]*-[[:space:]]*-[[:space:]]*$//' | head -25)
	PERF_OUT=$(printf 'perf: stream s_perf (another sink, same records), %s s from releasing the sink lock to process_available returning;
perf record -g -F 999 -p %s (the worker and its librdkafka threads), %% of its %s cpu-clock samples

by thread:\n%s\n\ntop 25 symbols (self time):\n%s\n' \
		"$PERF_SECS" "$PERF_WORKER" "$PERF_SAMPLES" "$PERF_THREADS" "$PERF_TOP")
fi

# ---- report ----------------------------------------------------------------

LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
SERVER_VERSION=$(psql_q -c "SHOW server_version")
RDKAFKA=$("$PY" -c 'import confluent_kafka; print(confluent_kafka.libversion()[0])')
COMMIT=$(git -c safe.directory="$SRC" -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -c safe.directory="$SRC" -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ] && COMMIT="$COMMIT + uncommitted changes"

rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%d", n / s; else print "-" }'; }
mb() { awk -v k="$1" 'BEGIN { if (k ~ /^[0-9]+$/) printf "%.0f MB", k / 1024; else print "-" }'; }
group() { sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|,\)/\1,\2\3/' -e 'ta' <<<"$1"; }

STREAM_RATE=$(rate "$RECORDS" "$STREAM_SECS")
COPY_RATE=$(rate "$RECORDS" "$COPY_SECS")
PY_RATE=$(rate "$RECORDS" "$PY_SECS")

{
	echo
	echo "streaming benchmark: $(group "$RECORDS") JSON order records (avg $AVG_LEN bytes, $JSON_BYTES bytes),"
	echo "  topic of $PARTITIONS partitions ($PER_PART records each, compression $COMPRESSION) on the mock broker, produced by kcat in ${PRODUCE_SECS}s"
	echo "commit $COMMIT; nproc $(nproc); PostgreSQL $SERVER_VERSION; librdkafka $RDKAFKA; fsync on, shared_buffers 1GB, max_wal_size 4GB"
	echo "load average before $LOAD_BEFORE, after $LOAD_AFTER (other work on the machine skews the numbers)"
	echo
	printf '%-52s %8s %11s  %-13s %s\n' "method" "seconds" "records/s" "CPU seconds" "peak RSS (VmHWM)"
	printf '%-52s %8s %11s  %-13s %s\n' "(1) streaming: stream s, background worker" "$STREAM_SECS" \
		"$(group "$STREAM_RATE")" "$WORKER_CPU" "$(mb "$WORKER_HWM") worker (pid $WORKER_PID)"
	printf '%-52s %8s %11s  %-13s %s\n' "(2) COPY orders_copy FROM file (FORMAT csv)" "$COPY_SECS" \
		"$(group "$COPY_RATE")" "$COPY_CPU" "$(mb "$COPY_HWM") backend"
	printf '%-52s %8s %11s  %-13s %s\n' "(3) bench/python_loop.py (confluent_kafka+psycopg2)" "$PY_SECS" \
		"$(group "$PY_RATE")" "$PY_CPU + $PY_BACKEND_CPU" "$(mb "$PY_RSS_KB") python + $(mb "$PY_BACKEND_KB") backend"
	echo "(CPU seconds: user + system time of the process doing the work, with all its threads; python + its backend;"
	echo " the mock broker used $(awk -v a="$B0" -v b="$B1" 'BEGIN { printf "%.2f", b - a }') s more during (1) and $(awk -v a="$B2" -v b="$B3" 'BEGIN { printf "%.2f", b - a }') s during (3), on the same $(nproc) cores)"
	echo
	printf 'stream / COPY    %s\n' "$(awk -v a="$STREAM_RATE" -v b="$COPY_RATE" 'BEGIN { printf "%.2f", a / b }')"
	printf 'stream / python  %s\n' "$(awk -v a="$STREAM_RATE" -v b="$PY_RATE" 'BEGIN { printf "%.2f", a / b }')"
	echo
	if [ -z "$CHECK_FAIL" ] && [ "$DIFF_ROWS" = 0 ]; then
		echo "checked: each table holds exactly the $(group "$RECORDS") records (count, distinct order_id, sum(amount) = $EXPECT_SUM); stream rows = COPY rows"
	else
		echo "CHECK FAILED: ${CHECK_FAIL:-} ${DIFF_ROWS} rows differ between orders_stream and orders_copy"
	fi
	echo "python loop: $PY_BATCHES batches; stream s: status | last batch | last_error | source_error = $STREAM_STATE; dead letters: $DEAD"
	echo
	echo "stream s batches (batch_id | input rows | bad rows | duration | rows/s):"
	sed 's/^/  /' <<<"$PROGRESS"
	echo
	echo "server log (errors, warnings, streaming lines):"
	grep -E 'ERROR|WARNING|FATAL|PANIC|stream|streaming' "$PGDATA_DIR/server.log" | head -40 | sed 's/^/  /'
	if [ -n "$PERF_OUT" ]; then
		echo
		echo "$PERF_OUT"
	fi
}

if [ -n "$CHECK_FAIL" ] || [ "$DIFF_ROWS" != 0 ]; then
	exit 1
fi
exit 0
