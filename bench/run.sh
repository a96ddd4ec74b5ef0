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
# buffers a process touched) of the processes doing the work, how long the
# worker's main thread was on a CPU, waiting for one (the machine's other
# work) and asleep (mostly waiting for the Kafka client's prefetch, which
# streaming.batch_memory bounds), then the stream's batches and the server
# log's streaming lines.  Every table is
# checked to hold exactly the N records.
#
# The records are generated once (bench/gen_orders.py: JSON lines and the
# same records as CSV) and produced with kcat, each keyless record to a
# random partition; bench/topic_offsets.py then checks that every partition
# still starts at offset 0 (the mock keeps 5 MiB per partition and silently
# drops older data): if not, they are produced again lz4-compressed to a
# second topic, which is then used.
#
# With --aggregate it measures windowed aggregation instead (issue 3), the
# same three ways on the same setup:
#
#   (1) stream "s" in append mode with a 10-minute watermark,
#         SELECT streaming.window_start() AS window_start,
#                streaming.window_end() AS window_end, status, count(*) AS cnt,
#                sum(amount) AS total_amount, avg(amount) AS avg_amount
#         FROM orders GROUP BY streaming.tumble(event_time, '5 minutes'), status
#       timed from create_stream until process_available returns (which
#       waits for the no-data batch that writes the closed windows); then
#       the sentinel (below) is produced and process_available waits for
#       the stream to write the last windows: that part is shown on its own
#       (it is mostly the idle worker's streaming.naptime, 1 s, before it
#       polls again); the worker's peak RSS is read after it, as above;
#   (2) COPY of the CSV into orders_copy, then INSERT INTO agg_copy SELECT
#       date_bin('5 minutes', event_time, 'epoch'), ..., count(*),
#       sum(amount), avg(amount) ... GROUP BY, both timed together;
#   (3) python_loop.py --aggregate agg_py: per 50k batch COPY into a
#       temporary staging table, INSERT INTO agg_py ... GROUP BY ... ON
#       CONFLICT (window_start, status) DO UPDATE (cnt, total_amount,
#       avg_amount merged), offsets, commit.
#
# The records' event times are in order up to a 2-minute jitter
# (gen_orders.py --in-order: 37 ms apart, ~10 hours per 1M records), so the
# watermark makes no row late, and a last sentinel record one day after the
# data (--sentinel) moves the watermark past every window of the data.  The
# sentinel is produced only once stream s has processed the data: produced
# with it, a batch cut by max_offsets_per_trigger could read it before the
# last records of other partitions and make those late.  (2) and (3) run
# after that and load it too.  The records are produced round-robin (record
# i to partition i mod P), so the partitions stay aligned in event time in
# batches cut by max_offsets_per_trigger.  Records/s are N / seconds for the stream and
# (N + 1) / seconds for (2) and (3).
# Checked: no late rows (sum of progress.num_late_rows is 0), every order
# counted in a closed window (sum(cnt) and sum(total_amount) of agg_stream
# are the data's), and agg_stream equals agg_copy and agg_py restricted to the
# windows the stream's final watermark closed (EXCEPT ALL both ways, on all
# six columns), which leaves out exactly the sentinel's window.  Rates count
# every record produced (N + the sentinel).  To see whether the worker's
# memory grows with the input, compare its peak RSS across --records (with
# the same --partitions and compression: the Kafka client's prefetch is per
# partition).
#
# With --join it measures a stream-static join instead (SPEC 3.5, issue 10),
# on the same setup plus a table users (user_id bigint PRIMARY KEY, name
# text, country text) of --users rows (default 100000), filled and VACUUM
# ANALYZEd before anything is timed; the orders' user_id is then in
# 1..--users (gen_orders.py --users), so every order has its user:
#
#   (1) stream "s": SELECT o.order_id, o.user_id, o.amount, o.status,
#       o.event_time, u.name AS user_name, u.country FROM orders o JOIN users
#       u ON u.user_id = o.user_id, into orders_stream of those seven typed
#       columns; timed as above;
#   (2) COPY of the CSV into orders_copy, then INSERT INTO orders_join_copy
#       (the same seven columns) SELECT ... FROM orders_copy o JOIN users u
#       ON u.user_id = o.user_id, two statements, timed together (as one
#       would do it by hand: no ANALYZE of orders_copy in between);
#   (3) not run (the Python loop would only add the same INSERT ... JOIN
#       after its COPY; it measures the client, not the join).
#
# With --join --aggregate: the aggregate benchmark's data and timing, the
# group being the user's country:
#
#   (1) stream "s", append, watermark 10 minutes:
#         SELECT streaming.window_start() AS window_start,
#                streaming.window_end() AS window_end, u.country,
#                count(*) AS cnt, sum(o.amount) AS total_amount
#         FROM orders o JOIN users u ON u.user_id = o.user_id
#         GROUP BY streaming.tumble(o.event_time, '5 minutes'), u.country
#   (2) COPY into orders_copy, then INSERT INTO agg_copy SELECT
#       date_bin('5 minutes', o.event_time, 'epoch'), ..., u.country,
#       count(*), sum(o.amount) FROM orders_copy o JOIN users u ON ...
#       GROUP BY 1, 2, 3, timed together;
#   (3) not run.
#
# Checked as above, without the Python loop's table: the stream's sink
# equals (2)'s table (EXCEPT ALL both ways, every column; for the aggregate
# the windows the final watermark closed), and holds every order once.  The
# report adds (2)'s split (COPY, INSERT ... JOIN), the EXPLAIN of (2)'s
# INSERT ... SELECT (planned after it ran, over the 1M-row orders_copy), and
# the stream's own plan as auto_explain (loaded with --join only, plans of
# statements over 100 ms, no ANALYZE: no cost per row) logged it from the
# worker: the plan join.c made for the batch's row count.
#
# With --dedup: the stateless benchmark with dedup_keys (SPEC 3.3):
#
#   (1) stream "s" as above with dedup_keys => ARRAY['order_id'] (no
#       watermark: every key is kept, in streaming.dedup_<id>, key bytea
#       PRIMARY KEY plus an index on expires_at);
#   (2) COPY of the CSV into orders_copy, then INSERT INTO orders_dedup_copy
#       (the same columns, order_id PRIMARY KEY) SELECT * FROM orders_copy
#       ON CONFLICT DO NOTHING, timed together: the records' duplicates
#       dropped against a keyed table that keeps them, as dedup does;
#   (3) not run (the Python loop does no dedup).
#
# The order_ids are unique, so every table holds the N records: what is
# measured is the cost of checking and keeping N keys.
#
# Latency (--latency RATES, issue 13): end to end, produce -> committed in
# the sink.  A stream "l" (stateless: SELECT order_id, amount, status,
# event_time, rate, produced_at FROM lat, into lat_sink) runs from the start
# on an empty topic "latency" of --partitions partitions; then for each rate
# R, bench/latency_producer.py produces R records/s for --latency-seconds,
# each carrying the wall clock just before it was produced (produced_at,
# microseconds), and process_available waits for the stream to catch up.
# The server runs with track_commit_timestamp = on, so a sink row's latency
# is pg_xact_commit_timestamp(xmin) - produced_at: exactly when its batch
# committed, with no polling of the sink.  Reported per rate: p50, p90, p99
# and max latency in ms (the first 2 s left out), the batches (how many, rows
# and duration per batch), the worker's CPU seconds; checked: the sink holds
# every record produced, once.  The worker stays up between rates, idle.
# On the embedded mock broker, two limits show in the figures and are the
# mock's, not the stream's: it holds an empty fetch for the whole
# fetch.wait.max.ms instead of answering when records arrive (pass
# --kafka-options '{"fetch.wait.max.ms": "5"}' to see the stream's own
# latency), and from about 20,000 records/s its one thread spends the
# whole of a core scanning each partition's message sets from the head on
# every fetch, so batches wait longer and longer on fetches
# (BENCH_LATENCY_LINGER=5 makes fewer, larger sets: it comes later).
#
# Options:
#   --records N     records to generate (default 1000000)
#   --partitions P  partitions of the topic (default 32)
#   --aggregate     the windowed aggregate benchmark described above
#   --join          the stream-static join benchmark described above (with
#                   --aggregate: the window per country over the join)
#   --dedup         the stateless benchmark with dedup_keys, as described above
#   --users K       rows of the users table with --join (default 100000)
#   --lz4           produce lz4-compressed from the start (default: only when
#                   the uncompressed topic does not fit in the mock)
#   --max-offsets-per-trigger M
#                   the source's max_offsets_per_trigger (default none: the
#                   first batch takes every record)
#   --batch-memory SIZE
#                   the server's streaming.batch_memory (default its own,
#                   64MB), which bounds the Kafka client's prefetch per
#                   partition: to compare worker RSS across --records, give
#                   one that every partition fills in both runs
#   --perf          afterwards, run the stream once more (into another sink)
#                   under `perf record -g` and print the worker's top 25
#                   symbols (root only; installs linux-perf if missing); with
#                   --aggregate the whole machine is recorded (perf record -a)
#                   and the report is the worker's, plus CPU time per process
#   --latency RATES end-to-end latency instead (issue 13): see "Latency" above;
#                   RATES is a comma-separated list of records/s (e.g. 2000,20000)
#   --latency-seconds S
#                   how long each rate is produced (default 20; the first 2 s
#                   of each are left out of the figures as warm-up)
#   --kafka-options JSON
#                   the source's kafka_options (default '{}'), e.g.
#                   '{"fetch.wait.max.ms": "5"}'
#   --parallel-workers N
#                   stream s's parallel_workers: N helpers (0: the worker
#                   reads and parses everything itself); default none given,
#                   that is automatic (NULL: up to
#                   streaming.max_parallel_workers_per_stream, 2, as the
#                   partitions allow), what a user who sets nothing gets
#   --no-install    use the extension installed for $PG_CONFIG as it is (as
#                   root too): how bench/compare.sh runs two builds
#   --keep          keep the temp dir (data, server log, perf.data)
# (under make: make bench BENCH_RECORDS=N BENCH_PARTITIONS=P BENCH_AGG=1 BENCH_JOIN=1
#  BENCH_USERS=K BENCH_LZ4=1 BENCH_MAX_OFFSETS=M BENCH_BATCH_MEMORY=SIZE BENCH_PERF=1
#  BENCH_LATENCY=RATES BENCH_LATENCY_SECONDS=S BENCH_KAFKA_OPTIONS=JSON
#  BENCH_PARALLEL_WORKERS=N BENCH_DEDUP=1)
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
AGG=${BENCH_AGG:-}
JOIN=${BENCH_JOIN:-}
DEDUP=${BENCH_DEDUP:-}
USERS=${BENCH_USERS:-100000}
FORCE_LZ4=${BENCH_LZ4:-}
MAX_OFFSETS=${BENCH_MAX_OFFSETS:-}
BATCH_MEMORY=${BENCH_BATCH_MEMORY:-}
LATENCY=${BENCH_LATENCY:-}
LATENCY_SECS=${BENCH_LATENCY_SECONDS:-20}
LATENCY_LINGER=${BENCH_LATENCY_LINGER:-0}
KAFKA_OPTIONS=${BENCH_KAFKA_OPTIONS:-'{}'}
PARALLEL_WORKERS=${BENCH_PARALLEL_WORKERS:-automatic}
PW_ARG=    # create_stream's parallel_workers argument, only when a number is given
NO_INSTALL=${BENCH_NO_INSTALL:-}
KEEP=

usage()
{
	sed -n '/^# Options:/,/^#  BENCH_USERS/p' "$0" | sed 's/^# \{0,1\}//'
}

while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--records=*) RECORDS=${1#*=}; shift ;;
		--partitions) PARTITIONS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--partitions=*) PARTITIONS=${1#*=}; shift ;;
		--perf) DO_PERF=1; shift ;;
		--aggregate) AGG=1; shift ;;
		--join) JOIN=1; shift ;;
		--dedup) DEDUP=1; shift ;;
		--users) USERS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--users=*) USERS=${1#*=}; shift ;;
		--lz4) FORCE_LZ4=1; shift ;;
		--max-offsets-per-trigger) MAX_OFFSETS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--max-offsets-per-trigger=*) MAX_OFFSETS=${1#*=}; shift ;;
		--batch-memory) BATCH_MEMORY=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--batch-memory=*) BATCH_MEMORY=${1#*=}; shift ;;
		--latency) LATENCY=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--latency=*) LATENCY=${1#*=}; shift ;;
		--latency-seconds) LATENCY_SECS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--latency-seconds=*) LATENCY_SECS=${1#*=}; shift ;;
		--kafka-options) KAFKA_OPTIONS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--kafka-options=*) KAFKA_OPTIONS=${1#*=}; shift ;;
		--parallel-workers) PARALLEL_WORKERS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--parallel-workers=*) PARALLEL_WORKERS=${1#*=}; shift ;;
		--no-install) NO_INSTALL=1; shift ;;
		--keep) KEEP=1; shift ;;
		-h|--help) usage; exit 0 ;;
		*) echo "bench/run.sh: unknown argument \"$1\"" >&2; usage >&2; exit 2 ;;
	esac
done
case $RECORDS in ''|*[!0-9]*|0) echo "bench/run.sh: --records wants a positive integer" >&2; exit 2 ;; esac
case $PARTITIONS in ''|*[!0-9]*|0) echo "bench/run.sh: --partitions wants a positive integer" >&2; exit 2 ;; esac
case $USERS in ''|*[!0-9]*|0) echo "bench/run.sh: --users wants a positive integer" >&2; exit 2 ;; esac
case $MAX_OFFSETS in ''|[1-9]|[1-9]*[0-9]) ;; *) echo "bench/run.sh: --max-offsets-per-trigger wants a positive integer" >&2; exit 2 ;; esac
case $PARALLEL_WORKERS in automatic) ;; ''|*[!0-9]*) echo "bench/run.sh: --parallel-workers wants a non-negative integer" >&2; exit 2 ;; esac
[ "$PARALLEL_WORKERS" != automatic ] && PW_ARG=", parallel_workers => $PARALLEL_WORKERS"
case $MAX_OFFSETS in *[!0-9]*) echo "bench/run.sh: --max-offsets-per-trigger wants a positive integer" >&2; exit 2 ;; esac
case $LATENCY in *[!0-9,]*|,*|*,|*,,*) echo "bench/run.sh: --latency wants records/s, comma-separated (2000,20000)" >&2; exit 2 ;; esac
case $LATENCY_SECS in ''|*[!0-9]*|0|1|2) echo "bench/run.sh: --latency-seconds wants an integer above 2" >&2; exit 2 ;; esac
if [ -n "$DEDUP" ] && { [ -n "$AGG" ] || [ -n "$JOIN" ] || [ -n "$LATENCY" ]; }; then
	echo "bench/run.sh: --dedup goes with none of --aggregate, --join, --latency" >&2; exit 2
fi
[ -n "$DEDUP" ] && PW_ARG="$PW_ARG, dedup_keys => ARRAY['order_id']"
if [ -n "$LATENCY" ] && { [ -n "$AGG" ] || [ -n "$JOIN" ] || [ -n "$DO_PERF" ]; }; then
	echo "bench/run.sh: --latency goes with none of --aggregate, --join, --perf" >&2; exit 2
fi

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
fi
if [ -n "$IS_ROOT" ] && [ -z "$NO_INSTALL" ]; then
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

if [ -z "$LATENCY" ]; then
GEN_OPTS=()
[ -n "$AGG" ] && GEN_OPTS=(--in-order --sentinel)
[ -n "$JOIN" ] && GEN_OPTS+=(--users "$USERS")
say "generating $RECORDS records${AGG:+ (in order, and a sentinel)}${JOIN:+ (user_id in 1..$USERS)}"
read -r TOTAL JSON_BYTES AVG_LEN EXPECT_SUM < <("$PY" "$BENCH/gen_orders.py" "${GEN_OPTS[@]}" "$RECORDS" \
	"$TMP/data/orders.jsonl" "$TMP/data/orders.csv") || die "gen_orders.py failed"
[ -n "$EXPECT_SUM" ] || die "gen_orders.py failed"
# --aggregate: the sentinel (the last line) is produced on its own, after the
# stream has caught up with the data (see run_stream)
PRODUCE_FILE=$TMP/data/orders.jsonl
PRODUCE_EXPECT=$TOTAL
if [ -n "$AGG" ]; then
	tail -n 1 "$TMP/data/orders.jsonl" >"$TMP/data/sentinel.jsonl"
	truncate -s "-$(stat -c %s "$TMP/data/sentinel.jsonl")" "$TMP/data/orders.jsonl" || die "truncate failed"
	PRODUCE_EXPECT=$((TOTAL - 1))
	PRODUCE_ROUND_ROBIN=1
fi
fi

say "starting the mock broker"
"$SRC/test/mock_broker" --topic "orders:$PARTITIONS" --topic "orders_lz4:$PARTITIONS" \
	--topic "latency:$PARTITIONS" --bootstrap-file "$TMP/bootstrap" >"$TMP/broker.log" 2>&1 &
BROKER_PID=$!
for _ in $(seq 100); do
	[ -s "$TMP/bootstrap" ] && break
	kill -0 "$BROKER_PID" 2>/dev/null || { cat "$TMP/broker.log" >&2; die "the mock broker exited"; }
	sleep 0.1
done
[ -s "$TMP/bootstrap" ] || die "the mock broker did not start"
BOOTSTRAP=$(head -n1 "$TMP/bootstrap")

# produce TOPIC [kcat options...]: produce the records ($PRODUCE_FILE), then
# check that the broker kept them all (low offset 0 everywhere,
# $PRODUCE_EXPECT records in all).
produce()
{
	local topic=$1 lo hi sum=0 bad=0 p
	shift
	if [ -n "${PRODUCE_ROUND_ROBIN:-}" ]; then
		# record i to partition i mod P (one kcat -p per partition, 4 at a
		# time): every partition's offsets then follow the event times
		# alike, so batches cut by max_offsets_per_trigger (split by lag)
		# stay aligned in event time.  Randomly partitioned, a partition's
		# k-th record drifts by minutes of event time from the others' (a
		# random walk), and a 10-minute watermark makes some rows late.
		rm -f "$TMP/data/part."*
		awk -v p="$PARTITIONS" -v d="$TMP/data/part." '{ print > (d ((NR - 1) % p)) }' "$PRODUCE_FILE" ||
			return 1
		seq 0 $((PARTITIONS - 1)) | xargs -P 4 -I{} kcat -P -b "$BOOTSTRAP" -t "$topic" -p {} \
			-X queue.buffering.max.messages=1000000 -X linger.ms=50 "$@" -l "$TMP/data/part.{}" \
			2>"$TMP/kcat.log" || { cat "$TMP/kcat.log" >&2; return 1; }
		rm -f "$TMP/data/part."*
	else
		# sticky.partitioning.linger.ms=0: each keyless record to a random
		# partition; the default (10 ms of records to one partition) fills some
		# partitions far more than others and past the mock's 5 MiB
		kcat -P -b "$BOOTSTRAP" -t "$topic" -X queue.buffering.max.messages=1000000 \
			-X linger.ms=50 -X sticky.partitioning.linger.ms=0 "$@" -l "$PRODUCE_FILE" 2>"$TMP/kcat.log" ||
			{ cat "$TMP/kcat.log" >&2; return 1; }
	fi
	"$PY" "$BENCH/topic_offsets.py" "$BOOTSTRAP" "$topic" >"$TMP/offsets.$topic" || return 1
	while read -r p lo hi; do
		[ "$lo" = 0 ] || bad=$((bad + 1))
		sum=$((sum + hi - lo))
	done <"$TMP/offsets.$topic"
	if [ "$bad" -gt 0 ] || [ "$sum" != "$PRODUCE_EXPECT" ]; then
		say "topic $topic: $bad partitions with low offset > 0, $sum of $PRODUCE_EXPECT records kept (5 MiB per partition limit of the mock)"
		return 1
	fi
	return 0
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
TOPIC=orders
COMPRESSION=none
if [ -z "$LATENCY" ]; then
t0=$(date +%s.%N)
if [ -n "$FORCE_LZ4" ]; then
	TOPIC=orders_lz4
	COMPRESSION=lz4
	say "producing, lz4-compressed, to $TOPIC ($PARTITIONS partitions)"
	produce orders_lz4 -z lz4 || die "the broker did not keep all records even with lz4; use more --partitions"
elif say "producing to $TOPIC ($PARTITIONS partitions)"; ! produce orders; then
	TOPIC=orders_lz4
	COMPRESSION=lz4
	say "producing again, lz4-compressed, to $TOPIC"
	produce orders_lz4 -z lz4 || die "the broker did not keep all records even with lz4; use more --partitions"
fi
PRODUCE_SECS=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
PER_PART=$(awk '{ n = $3 - $2; if (min == "" || n < min) min = n; if (n > max) max = n }
	END { printf "%d..%d", min, max }' "$TMP/offsets.$TOPIC")
fi

# ---- helpers: the worker's resources, the load ------------------------------

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

# sched_secs PID: from /proc/PID/task/*/schedstat, "R W A": the main
# thread's seconds on a CPU (R) and waiting on a run queue for one (W), and
# the run-queue wait of all its threads (A); the rest of the main thread's
# life it slept (waited for the broker, the disk, a lock)
sched_secs()
{
	local t main=/proc/$1/task/$1/schedstat
	[ -r "$main" ] || { echo "- - -"; return; }
	for t in /proc/$1/task/*/schedstat; do
		cat "$t" 2>/dev/null
	done | awk -v m="$(cat "$main" 2>/dev/null)" '{ a += $2 }
		END { split(m, f, " "); printf "%.2f %.2f %.2f", f[1] / 1e9, f[2] / 1e9, a / 1e9 }'
}

# load1: the 1-minute load average now (sampled as each part starts)
load1() { cut -d' ' -f1 /proc/loadavg; }

# ---- latency mode (--latency) ------------------------------------------------

# run_latency: the whole of --latency (see the header), once the server runs;
# prints its report and exits.
run_latency()
{
	local r first=1 n secs f l w c0 c1 load stats batches rows=() ok=1 i
	say "(latency) stream l on the empty topic latency ($PARTITIONS partitions)"
	psql_q -v bootstrap="$BOOTSTRAP" -v kafka_options="$KAFKA_OPTIONS" -v pw_arg="$PW_ARG" >/dev/null <<'EOF' || die "latency setup failed"
CREATE EXTENSION streaming;
SELECT streaming.create_kafka_source('lat', :'bootstrap', topics => ARRAY['latency'],
    starting_offsets => 'earliest',
    columns => 'order_id bigint, amount numeric(10,2), status text, event_time timestamptz, rate integer, produced_at timestamptz',
    kafka_options => :'kafka_options'::jsonb);
SELECT streaming.create_stream('l', 'SELECT order_id, amount, status, event_time, rate, produced_at FROM lat',
    sink => 'lat_sink', start => true :pw_arg);
EOF
	for i in $(seq 200); do
		w=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = 'l' AND status = 'running'")
		[ -n "$w" ] && break
		sleep 0.05
	done
	[ -n "$w" ] || die "the worker of stream l did not start"
	sleep 2		# its first (empty) batches, then idle
	for r in ${LATENCY//,/ }; do
		say "(latency) $r records/s for $LATENCY_SECS s"
		load=$(load1)
		c0=$(cpu_secs "$w")
		read -r n secs f l < <("$PY" "$BENCH/latency_producer.py" --bootstrap "$BOOTSTRAP" --topic latency \
			--rate "$r" --seconds "$LATENCY_SECS" --first-id "$first" --linger-ms "$LATENCY_LINGER") || die "latency_producer.py failed"
		[ -n "${l:-}" ] || die "latency_producer.py failed"
		psql_q -c "SELECT streaming.process_available('l', '5 minutes')" >/dev/null ||
			die "the stream did not catch up with the $r records/s run"
		c1=$(cpu_secs "$w")
		# count, distinct, the rows measured (after the warm-up), p50 p90 p99 max
		stats=$(psql_q -F ' ' -v r="$r" -v f="$f" -v l="$l" <<'EOF'
WITH a AS (SELECT order_id, produced_at,
                  extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms
             FROM lat_sink WHERE rate = :r),
     m AS (SELECT ms FROM a WHERE produced_at >= (SELECT min(produced_at) FROM a) + interval '2 seconds')
SELECT (SELECT count(*) FROM a), (SELECT count(DISTINCT order_id) FROM a WHERE order_id BETWEEN :f AND :l),
       count(*),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1),
       round(percentile_cont(0.9) WITHIN GROUP (ORDER BY ms)::numeric, 1),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1),
       round(max(ms)::numeric, 1)
  FROM m;
EOF
		) || die "reading the latencies failed"
		# the batches that wrote this rate's rows: how many, rows and ms per batch
		batches=$(psql_q -F ' ' -v r="$r" <<'EOF'
SELECT count(*), round(avg(num_input_rows)), round(avg(extract(epoch FROM duration) * 1000)::numeric, 1),
       round((extract(epoch FROM max(started_at) - min(started_at)) * 1000 / greatest(count(*) - 1, 1))::numeric, 1)
  FROM streaming.progress
 WHERE stream = 'l' AND num_input_rows > 0
   AND started_at >= (SELECT min(produced_at) FROM lat_sink WHERE rate = :r)
   AND started_at <= (SELECT max(pg_xact_commit_timestamp(xmin)) FROM lat_sink WHERE rate = :r);
EOF
		) || die "reading the batches failed"
		read -r cnt dist meas p50 p90 p99 pmax <<<"$stats"
		[ "$cnt" = "$n" ] && [ "$dist" = "$n" ] || ok=
		rows+=("$(printf '%7s %8s %8s %7s %7s %7s %8s   %s  %6.2f  %s' "$r" "$n" "$secs" "$p50" "$p90" "$p99" "$pmax" \
			"$(awk '{ printf "%7s %9s %8s %9s", $1, $2, $3, $4 }' <<<"$batches")" \
			"$(awk -v a="$c0" -v b="$c1" 'BEGIN { print b - a }')" "$load")")
		rows+=("#check $r: $cnt rows in the sink, $dist distinct order_ids of $n produced ($f..$l); $meas measured")
		first=$((l + 1))
	done
	LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)
	local commit
	commit=$(git -c safe.directory="$SRC" -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
	[ -n "$(git -c safe.directory="$SRC" -C "$SRC" status --porcelain --untracked-files=no 2>/dev/null)" ] &&
		commit="$commit + uncommitted changes"
	{
		echo
		echo "streaming latency benchmark: stateless stream l (6 typed columns), topic latency of $PARTITIONS partitions, parallel_workers $PARALLEL_WORKERS"
		echo "  on the mock broker; source kafka_options $KAFKA_OPTIONS; produce -> commit of the row's batch"
		echo "  (pg_xact_commit_timestamp(xmin) - produced_at), the first 2 s of each rate left out"
		echo "checkout $commit; library $("$PG_CONFIG" --pkglibdir)/streaming.so; nproc $(nproc); PostgreSQL $(psql_q -c 'SHOW server_version'); fsync on, streaming.naptime $(psql_q -c 'SHOW streaming.naptime')"
		echo "load average before $LOAD_BEFORE, after $LOAD_AFTER"
		echo
		printf '%7s %8s %8s %7s %7s %7s %8s   %7s %9s %8s %9s  %6s  %s\n' "rate/s" "records" "seconds" "p50 ms" "p90 ms" \
			"p99 ms" "max ms" "batches" "rows/bat" "ms/batch" "ms apart" "CPU s" "load1"
		for i in "${rows[@]}"; do
			case $i in "#check"*) ;; *) echo "$i" ;; esac
		done
		echo
		for i in "${rows[@]}"; do
			case $i in "#check"*) echo "${i#\#check }" ;; esac
		done
		[ -n "$ok" ] && echo "checked: every record produced is in lat_sink exactly once" ||
			echo "CHECK FAILED: lat_sink does not hold every record produced exactly once"
		echo
		echo "server log (errors, warnings):"
		grep -E 'ERROR|WARNING|FATAL|PANIC' "$PGDATA_DIR/server.log" | head -20 | sed 's/^/  /'
	}
	[ -n "$ok" ] || exit 1
	exit 0
}

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
# --join: the plans of the stream's join (and of (2)'s INSERT) in the log
[ -n "$JOIN" ] && cat >>"$PGDATA_DIR/postgresql.conf" <<EOF
shared_preload_libraries = 'streaming, auto_explain'
auto_explain.log_min_duration = '100ms'
auto_explain.log_nested_statements = on
EOF
[ -n "$BATCH_MEMORY" ] && echo "streaming.batch_memory = '$BATCH_MEMORY'" >>"$PGDATA_DIR/postgresql.conf"
# --latency: a row's commit time is pg_xact_commit_timestamp(xmin); every batch's progress kept
[ -n "$LATENCY" ] && printf 'track_commit_timestamp = on\nstreaming.progress_history = 1000000\nstreaming.log_batches = off\n' \
	>>"$PGDATA_DIR/postgresql.conf"
as_server "$PGBIN/pg_ctl" -D "$PGDATA_DIR" -l "$PGDATA_DIR/server.log" -w -t 60 start >/dev/null ||
	{ tail -n 30 "$PGDATA_DIR/server.log" >&2; die "the server did not start"; }

# psql_q ARGS...: psql on the private server, unaligned, no headers.
psql_q()
{
	"$PGBIN/psql" -X -q -At -v ON_ERROR_STOP=1 -h "$SOCK" -p "$PORT" -U postgres -d postgres "$@"
}

[ -n "$LATENCY" ] && run_latency   # (defined above; it exits)

COLS='order_id bigint, user_id bigint, amount numeric(10,2), status text, event_time timestamptz'
# the result tables of --aggregate: (2) and (3) hold what the stream's sink
# holds (create_stream makes agg_stream from the select list), (3) keyed for
# its upsert
AGG_COLS='window_start timestamptz, window_end timestamptz, status text, cnt bigint, total_amount numeric, avg_amount numeric'
# their columns, in order (what the checks compare)
AGG_LIST='window_start, window_end, status, cnt, total_amount, avg_amount'
# --join: the sinks of the stream and of (2) get the user's two columns; the
# aggregate groups by the user's country and has no avg
SINK_COLS=$COLS
if [ -n "$JOIN" ]; then
	SINK_COLS="$COLS, user_name text, country text"
	AGG_COLS='window_start timestamptz, window_end timestamptz, country text, cnt bigint, total_amount numeric'
	AGG_LIST='window_start, window_end, country, cnt, total_amount'
fi
psql_q -v cols="$COLS" -v sinkcols="$SINK_COLS" -v aggcols="$AGG_COLS" -v bootstrap="$BOOTSTRAP" -v topic="$TOPIC" \
	-v max_offsets="$MAX_OFFSETS" -v join="${JOIN:-0}" -v users="$USERS" -v kafka_options="$KAFKA_OPTIONS" \
	<<'EOF' || die "setup failed"
CREATE EXTENSION streaming;
SELECT format('CREATE TABLE %I (%s)', t, :'cols') FROM unnest(ARRAY['orders_copy', 'orders_py']) t
\gexec
SELECT format('CREATE TABLE %I (%s)', t, :'sinkcols') FROM unnest(ARRAY['orders_stream', 'orders_perf', 'orders_join_copy']) t
\gexec
SELECT format('CREATE TABLE orders_dedup_copy (%s, PRIMARY KEY (order_id))', :'cols')
\gexec
SELECT format('CREATE TABLE agg_copy (%s)', :'aggcols'),
       format('CREATE TABLE agg_py (%s, PRIMARY KEY (window_start, %s))', :'aggcols',
              CASE WHEN :join = 1 THEN 'country' ELSE 'status' END)
\gexec
-- --join's table: user_id 1..users, a name and one of 20 countries
\if :join
CREATE TABLE users (user_id bigint PRIMARY KEY, name text NOT NULL, country text NOT NULL);
INSERT INTO users
SELECT i, 'user ' || i,
       (ARRAY['US', 'DE', 'FR', 'GB', 'IT', 'ES', 'NL', 'BE', 'SE', 'NO',
              'DK', 'FI', 'PL', 'PT', 'AT', 'CH', 'JP', 'BR', 'CA', 'AU'])[1 + abs(hashint8(i)) % 20]
  FROM generate_series(1, :users) i;
VACUUM ANALYZE users;
\endif
SELECT streaming.create_kafka_source('orders', :'bootstrap', topics => ARRAY[:'topic'],
    starting_offsets => 'earliest', columns => :'cols',
    max_offsets_per_trigger => nullif(:'max_offsets', '')::bigint,
    kafka_options => :'kafka_options'::jsonb)
\g /dev/null
EOF

# the stream's query and options: create_stream(name, $QUERY, sink => ...,
# output_mode => $OUTPUT_MODE, watermark => $WATERMARK)
if [ -n "$AGG" ] && [ -n "$JOIN" ]; then
	QUERY="SELECT streaming.window_start() AS window_start, streaming.window_end() AS window_end,
       u.country, count(*) AS cnt, sum(o.amount) AS total_amount
  FROM orders o JOIN users u ON u.user_id = o.user_id
 GROUP BY streaming.tumble(o.event_time, '5 minutes'), u.country"
	OUTPUT_MODE=append
	WATERMARK='10 minutes'
elif [ -n "$AGG" ]; then
	QUERY="SELECT streaming.window_start() AS window_start, streaming.window_end() AS window_end,
       status, count(*) AS cnt, sum(amount) AS total_amount, avg(amount) AS avg_amount
  FROM orders
 GROUP BY streaming.tumble(event_time, '5 minutes'), status"
	OUTPUT_MODE=append
	WATERMARK='10 minutes'
elif [ -n "$JOIN" ]; then
	QUERY='SELECT o.order_id, o.user_id, o.amount, o.status, o.event_time, u.name AS user_name, u.country
  FROM orders o JOIN users u ON u.user_id = o.user_id'
	OUTPUT_MODE=append
	WATERMARK=
else
	QUERY='SELECT order_id, user_id, amount, status, event_time FROM orders'
	OUTPUT_MODE=append
	WATERMARK=
fi

# produce_sentinel: --aggregate's last record, after the data.  Produced
# with the data, it could be read (with max_offsets_per_trigger) in a batch
# before the last records of other partitions, which its event time would
# then make late.
produce_sentinel()
{
	local opts=()
	[ "$COMPRESSION" = lz4 ] && opts=(-z lz4)
	PRODUCE_FILE=$TMP/data/sentinel.jsonl PRODUCE_EXPECT=$TOTAL PRODUCE_ROUND_ROBIN= produce "$TOPIC" "${opts[@]}" ||
		{ say "producing the sentinel failed"; return 1; }
}

# run_stream NAME SINK: create and start the stream, wait for it to process
# everything; prints "seconds worker_pid vmhwm_kb cpu_seconds" (of the
# worker, read just before it is stopped).  Stops the stream.  When
# AFTER_CATCH_UP names a command, it is run once the stream has processed
# what was there, and the stream is then waited for again: neither is in
# the seconds printed, which go to $TMP/catch_up_secs (the wait is mostly
# the idle worker's streaming.naptime before it polls again).
run_stream()
{
	local name=$1 sink=$2 secs secs2 pid
	secs=$(psql_q -v name="$name" -v sink="$sink" -v query="$QUERY" -v output_mode="$OUTPUT_MODE" \
		-v watermark="$WATERMARK" -v pw_arg="$PW_ARG" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT streaming.create_stream(:'name', :'query', sink => :'sink',
    output_mode => :'output_mode', watermark => nullif(:'watermark', '')::interval, start => true
    :pw_arg)
\g /dev/null
SELECT streaming.process_available(:'name', '10 minutes')
\g /dev/null
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3);
EOF
	) || return 1
	if [ -n "${AFTER_CATCH_UP:-}" ]; then
		"$AFTER_CATCH_UP" >&2 || return 1
		secs2=$(psql_q -v name="$name" <<'EOF'
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT streaming.process_available(:'name', '10 minutes')
\g /dev/null
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3);
EOF
		) || return 1
		echo "$secs2" >"$TMP/catch_up_secs"
	fi
	pid=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = '$name'")
	if [ -n "$pid" ]; then
		echo "$secs $pid $(vmhwm_kb "$pid") $(cpu_secs "$pid") $(sched_secs "$pid")"
	else
		echo "$secs - - - - - -"
	fi
	psql_q -c "SELECT streaming.stop('$name')" >/dev/null
}


# ---- (1) the extension -----------------------------------------------------

STREAM_SINK=orders_stream
[ -n "$AGG" ] && STREAM_SINK=agg_stream
say "(1) stream"
LOAD_1=$(load1)
B0=$(cpu_secs "$BROKER_PID")
CATCH_UP=
[ -n "$AGG" ] && CATCH_UP=produce_sentinel
read -r STREAM_SECS WORKER_PID WORKER_HWM WORKER_CPU WORKER_RUN WORKER_RQ WORKER_RQ_ALL < <(AFTER_CATCH_UP=$CATCH_UP run_stream s "$STREAM_SINK") ||
	{ tail -n 40 "$PGDATA_DIR/server.log" >&2; die "the stream run failed"; }
[ -n "${STREAM_SECS:-}" ] || { tail -n 40 "$PGDATA_DIR/server.log" >&2; die "the stream run failed"; }

B1=$(cpu_secs "$BROKER_PID")

# ---- (2) server-side COPY (and, with --aggregate or --join, INSERT ... SELECT)

LOAD_2=$(load1)
if [ -z "$AGG" ] && [ -z "$JOIN" ] && [ -z "$DEDUP" ]; then
say "(2) COPY"
read -r COPY_SECS COPY_HWM COPY_CPU COPY_RQ < <(psql_q -F ' ' -v csv="$TMP/data/orders.csv" -v hz="$(getconf CLK_TCK)" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
COPY orders_copy FROM :'csv' (FORMAT csv);
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+)'),
       (SELECT round((f[12]::bigint + f[13]::bigint) / :hz::numeric, 2)
        FROM string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f),
       round(split_part(pg_read_file('/proc/self/schedstat'), ' ', 2)::numeric / 1e9, 2);
EOF
) || die "COPY failed"
[ -n "${COPY_SECS:-}" ] || die "COPY failed"
else
# the statement after the COPY
if [ -n "$AGG" ] && [ -n "$JOIN" ]; then
	SECOND="INSERT .. JOIN .. GROUP BY"
	SECOND_SQL="INSERT INTO agg_copy (window_start, window_end, country, cnt, total_amount)
SELECT date_bin('5 minutes', o.event_time, 'epoch'),
       date_bin('5 minutes', o.event_time, 'epoch') + interval '5 minutes',
       u.country, count(*), sum(o.amount)
  FROM orders_copy o JOIN users u ON u.user_id = o.user_id
 GROUP BY 1, 2, 3"
elif [ -n "$AGG" ]; then
	SECOND="INSERT .. GROUP BY"
	SECOND_SQL="INSERT INTO agg_copy (window_start, window_end, status, cnt, total_amount, avg_amount)
SELECT date_bin('5 minutes', event_time, 'epoch'),
       date_bin('5 minutes', event_time, 'epoch') + interval '5 minutes',
       status, count(*), sum(amount), avg(amount)
  FROM orders_copy
 GROUP BY 1, 2, 3"
elif [ -n "$DEDUP" ]; then
	SECOND="INSERT .. ON CONFLICT DO NOTHING"
	SECOND_SQL="INSERT INTO orders_dedup_copy SELECT * FROM orders_copy ON CONFLICT DO NOTHING"
else
	SECOND="INSERT .. JOIN"
	SECOND_SQL="INSERT INTO orders_join_copy (order_id, user_id, amount, status, event_time, user_name, country)
SELECT o.order_id, o.user_id, o.amount, o.status, o.event_time, u.name, u.country
  FROM orders_copy o JOIN users u ON u.user_id = o.user_id"
fi
say "(2) COPY + $SECOND"
# two statements, two transactions, as one would run them by hand
read -r COPY_SECS COPY_ONLY_SECS GROUP_SECS COPY_HWM COPY_CPU COPY_RQ < <(psql_q -F ' ' -v csv="$TMP/data/orders.csv" \
	-v hz="$(getconf CLK_TCK)" -v second="$SECOND_SQL" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
COPY orders_copy FROM :'csv' (FORMAT csv);
SELECT extract(epoch FROM clock_timestamp()) AS t1 \gset
:second;
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3),
       round((:t1 - :t0)::numeric, 3),
       round((extract(epoch FROM clock_timestamp()) - :t1)::numeric, 3),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+)'),
       (SELECT round((f[12]::bigint + f[13]::bigint) / :hz::numeric, 2)
        FROM string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f),
       round(split_part(pg_read_file('/proc/self/schedstat'), ' ', 2)::numeric / 1e9, 2);
EOF
) || die "COPY + $SECOND failed"
[ -n "${COPY_SECS:-}" ] || die "COPY + $SECOND failed"
# its plan, planned again now (orders_copy as it is: analysed only if
# autovacuum got to it)
[ -n "$JOIN" ] && psql_q -v second="$SECOND_SQL" >"$TMP/explain_copy.txt" 2>&1 <<'EOF'
EXPLAIN :second;
EOF
fi

# ---- (3) the Python loop ---------------------------------------------------

LOAD_3=-
if [ -z "$JOIN" ] && [ -z "$DEDUP" ]; then
say "(3) python_loop.py${AGG:+ --aggregate}"
psql_q -c CHECKPOINT || die "CHECKPOINT failed"
LOAD_3=$(load1)
PY_TARGET=(--table orders_py)
[ -n "$AGG" ] && PY_TARGET=(--aggregate agg_py)
B2=$(cpu_secs "$BROKER_PID")
read -r PY_ROWS PY_SECS _ PY_BATCHES PY_RSS_KB PY_BACKEND_KB PY_CPU PY_BACKEND_CPU < <("$PY" "$BENCH/python_loop.py" \
	--bootstrap "$BOOTSTRAP" --topic "$TOPIC" "${PY_TARGET[@]}" \
	--dsn "host=$SOCK port=$PORT user=postgres dbname=postgres") ||
	die "python_loop.py failed"
[ -n "${PY_SECS:-}" ] || die "python_loop.py failed"
B3=$(cpu_secs "$BROKER_PID")
else
	# --join, --dedup: no Python loop (see the header)
	B2=0 B3=0 PY_SECS=0 PY_BATCHES=- PY_RSS_KB=- PY_BACKEND_KB=- PY_CPU=- PY_BACKEND_CPU=-
fi

# ---- checks ----------------------------------------------------------------

if [ -z "$AGG" ]; then
# the third table: python's, or with --join (2)'s joined rows
THIRD="SELECT 'python', order_id, amount FROM orders_py"
REF=orders_copy
if [ -n "$JOIN" ]; then
	THIRD="SELECT 'copy_join', order_id, amount FROM orders_join_copy"
	REF=orders_join_copy
elif [ -n "$DEDUP" ]; then
	THIRD="SELECT 'copy_dedup', order_id, amount FROM orders_dedup_copy"
	REF=orders_dedup_copy
fi
CHECKS=$(psql_q -F ' ' -v n="$RECORDS" -v sum="$EXPECT_SUM" -v third="$THIRD" <<'EOF'
SELECT t, count(*) = :n AND count(DISTINCT order_id) = :n AND sum(amount) = :sum
          AND min(order_id) = 1 AND max(order_id) = :n,
       count(*), sum(amount)
FROM (SELECT 'stream' t, order_id, amount FROM orders_stream
      UNION ALL SELECT 'copy', order_id, amount FROM orders_copy
      UNION ALL :third) x
GROUP BY t ORDER BY t;
EOF
) || die "checking the tables failed"
CHECK_FAIL=$(awk '$2 != "t" { print $1 ": " $3 " rows, sum " $4 }' <<<"$CHECKS")
# the stream's exact contents against COPY's (same records, same types;
# --join: against COPY + INSERT .. JOIN, the user's columns too)
DIFF_ROWS=$(psql_q -c "SELECT count(*) FROM ((TABLE orders_stream EXCEPT ALL TABLE $REF) UNION ALL (TABLE $REF EXCEPT ALL TABLE orders_stream)) d")

PROGRESS=$(psql_q -F ' | ' -P footer=off <<'EOF'
SELECT batch_id, num_input_rows, num_bad_rows, duration,
       round(processed_rows_per_second) AS rows_per_s
FROM streaming.progress WHERE stream = 's' ORDER BY batch_id;
EOF
)
else
# The final watermark W of stream s decides which windows are compared: those
# with window_end <= W, which the stream has closed and written.  Every order
# must be in one of them (sum(cnt) = N), only the sentinel's window is left
# out of agg_copy and agg_py, and nothing may have been late.
FINAL_WM=$(psql_q -c "SELECT watermark FROM streaming.streams WHERE name = 's'")
# (--join: no python table; the columns are AGG_LIST)
PY_ON=1
[ -n "$JOIN" ] && PY_ON=0
CHECKS=$(psql_q -F ' ' -v n="$RECORDS" -v sum="$EXPECT_SUM" -v total="$TOTAL" -v cl="$AGG_LIST" -v py="$PY_ON" \
	-v pyunion="$([ "$PY_ON" = 1 ] && echo "UNION ALL SELECT 'python', cnt, total_amount FROM closed_py")" \
	-v pyunion_all="$([ "$PY_ON" = 1 ] && echo "UNION ALL SELECT 'python', cnt FROM agg_py")" <<'EOF'
SELECT watermark AS w FROM streaming.streams WHERE name = 's' \gset
CREATE TEMP VIEW closed_copy AS SELECT * FROM agg_copy WHERE window_end <= :'w';
CREATE TEMP VIEW closed_py AS SELECT * FROM agg_py WHERE window_end <= :'w';
-- one line per table: name, ok, windows x groups (rows), sum(cnt), sum(total_amount)
SELECT t, sum(cnt) = :n AND sum(total_amount) = :sum, count(*), sum(cnt), sum(total_amount)
FROM (SELECT 'stream' t, cnt, total_amount FROM agg_stream
      UNION ALL SELECT 'copy', cnt, total_amount FROM closed_copy
      :pyunion) x
GROUP BY t ORDER BY t;
-- rows of the stream's sink missing from the other table, and the other way
SELECT 'diff_copy', count(*) = 0, count(*) FILTER (WHERE side = 1), count(*) FILTER (WHERE side = 2) FROM (
    (SELECT 1 side, * FROM (SELECT :cl FROM agg_stream EXCEPT ALL SELECT :cl FROM closed_copy) a)
    UNION ALL
    (SELECT 2, * FROM (SELECT :cl FROM closed_copy EXCEPT ALL SELECT :cl FROM agg_stream) b)) d;
\if :py
SELECT 'diff_python', count(*) = 0, count(*) FILTER (WHERE side = 1), count(*) FILTER (WHERE side = 2) FROM (
    (SELECT 1 side, * FROM (SELECT :cl FROM agg_stream EXCEPT ALL SELECT :cl FROM closed_py) a)
    UNION ALL
    (SELECT 2, * FROM (SELECT :cl FROM closed_py EXCEPT ALL SELECT :cl FROM agg_stream) b)) d;
\endif
-- what the watermark left open: the sentinel's window only (one row, one record)
SELECT 'open_copy', count(*) = 1 AND sum(cnt) = 1, count(*), sum(cnt) FROM agg_copy WHERE window_end > :'w';
\if :py
SELECT 'open_python', count(*) = 1 AND sum(cnt) = 1, count(*), sum(cnt) FROM agg_py WHERE window_end > :'w';
\endif
-- every record went through the stream, none late, none bad
SELECT 'progress', sum(num_input_rows) = :total AND sum(num_late_rows) = 0 AND sum(num_bad_rows) = 0,
       sum(num_input_rows), sum(num_late_rows), sum(num_bad_rows)
FROM streaming.progress WHERE stream = 's';
-- each of agg_copy and agg_py (all windows) holds every record
SELECT 'all_' || t, sum(cnt) = :total, sum(cnt) FROM (SELECT 'copy' t, cnt FROM agg_copy
    :pyunion_all) x GROUP BY t ORDER BY t;
EOF
) || die "checking the tables failed"
CHECK_FAIL=$(awk '$2 != "t" { print }' <<<"$CHECKS")
DIFF_ROWS=0
read -r AGG_ROWS AGG_WINDOWS < <(psql_q -F ' ' -c "SELECT count(*), count(DISTINCT window_start) FROM agg_stream")
LATE_ROWS=$(awk '$1 == "progress" { print $4 }' <<<"$CHECKS")

PROGRESS=$(psql_q -F ' | ' -P footer=off <<'EOF'
SELECT batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows, duration,
       round(processed_rows_per_second) AS rows_per_s, watermark
FROM streaming.progress WHERE stream = 's' ORDER BY batch_id;
EOF
)
fi
STREAM_STATE=$(psql_q -F ' | ' -c "SELECT status, last_batch_id, coalesce(last_error, '-'), coalesce(source_error, '-') FROM streaming.stream_defs WHERE name = 's'")
DEAD=$(psql_q -c "SELECT count(*) FROM streaming.dead_letters")

# ---- optional: perf profile of the worker ----------------------------------

# The worker's pid exists only once the stream runs, so the stream is started
# while another session holds its sink locked: the worker's first batch
# waits for that lock (before it fetches anything), perf attaches to the
# worker (perf record -g -p), then the lock is let go.
#
# With --aggregate the sink is written only when windows close, so that lock
# would not stop the worker before it fetches: the whole machine is recorded
# instead (perf record -a) while the stream s_perf runs as stream s did, and
# the report is restricted to the worker's pid (all its threads) afterwards.
PERF_OUT=
LOCK_PID=
if [ -n "$DO_PERF" ] && [ -z "$AGG" ]; then
	say "(perf) stream again under perf record -p <worker>"
	psql_q -v query="$QUERY" >/dev/null <<'EOF' || die "create_stream s_perf failed"
SELECT streaming.create_stream('s_perf', :'query', sink => 'orders_perf', start => false);
CHECKPOINT;
EOF
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
elif [ -n "$DO_PERF" ]; then
	say "(perf) aggregate stream again under perf record -a"
	psql_q -c CHECKPOINT >/dev/null || die "CHECKPOINT failed"
	# DWARF call graphs: Debian's postgres has no frame pointers
	perf record -a --call-graph dwarf,16384 -F 499 -o "$TMP/perf.data" >"$TMP/perf-record.log" 2>&1 &
	PERF_PID=$!
	sleep 1
	kill -0 "$PERF_PID" 2>/dev/null || { cat "$TMP/perf-record.log" >&2; die "perf record failed"; }
	read -r PERF_SECS PERF_WORKER PERF_HWM PERF_CPU _ < <(run_stream s_perf agg_perf) ||
		die "the perf stream run failed"
	kill -INT "$PERF_PID"
	wait "$PERF_PID"
	PERF_PID=
	[ -n "${PERF_WORKER:-}" ] && [ "$PERF_WORKER" != - ] || die "the perf stream run failed"
	REPORT=(perf report -i "$TMP/perf.data" --stdio --no-children -g none)
	clean() { grep -v '^#' | grep -v '^$' | sed 's/[[:space:]]*-[[:space:]]*-[[:space:]]*$//'; }
	# CPU per thread over the whole recording (the other work on the machine included)
	PERF_PROCS=$("${REPORT[@]}" --sort pid 2>/dev/null | clean | head -8)
	# the worker's own (pid is a thread here: the worker and its librdkafka threads)
	PERF_W=(--pid "$PERF_WORKER" --percentage relative)
	PERF_SAMPLES=$("${REPORT[@]}" "${PERF_W[@]}" --sort pid 2>/dev/null | sed -n 's/^# Samples: \([^ ]*\) .*/\1/p' | head -1)
	PERF_THREADS=$("${REPORT[@]}" "${PERF_W[@]}" --sort pid 2>/dev/null | clean | head -6)
	# (perf 6.1's --sort dso alone mis-reports here: the shares per object
	# are summed from the symbols)
	for _ in 1 2 3; do
		"${REPORT[@]}" "${PERF_W[@]}" --sort dso,symbol 2>>"$TMP/perf-report.log" | clean >"$TMP/perf-self.txt"
		[ -s "$TMP/perf-self.txt" ] && break
	done
	PERF_DSOS=$(awk '{ sub("%", "", $1); s[$2] += $1 } END { for (d in s) printf "%7.2f%%  %s\n", s[d], d }' \
		"$TMP/perf-self.txt" | sort -rn | head -8)
	PERF_TOP=$(head -25 "$TMP/perf-self.txt")
	# time including callees of the named functions (hex addresses are
	# stripped static functions of postgres or librdkafka, and unwinding
	# noise), as % of the worker's samples: the report gives % of all
	# samples, scaled here by the worker's share
	PERF_SHARE=$("${REPORT[@]}" --pid "$PERF_WORKER" --sort pid 2>/dev/null | clean |
		awk '{ sub("%", "", $1); s += $1 } END { print s + 0 }')
	PERF_INCL=$(perf report -i "$TMP/perf.data" --stdio --children --no-inline -g none --pid "$PERF_WORKER" \
		--sort dso,symbol 2>>"$TMP/perf-report.log" | clean | grep -v '\] 0x0' |
		awk -v w="$PERF_SHARE" 'w > 0 { c = $1; s = $2; sub("%", "", c); sub("%", "", s); $1 = ""; $2 = "";
			sub(/^ +/, ""); printf "%7.2f%% %7.2f%%  %s\n", c * 100 / w, s * 100 / w, $0 }' | head -40)
	PERF_OUT=$(printf 'perf: aggregate stream s_perf (sink agg_perf, same records), %s s from create_stream to process_available returning
(worker CPU %s s, peak RSS %s kB), under perf record -a --call-graph dwarf -F 499

whole machine, by thread (%% of all samples):\n%s\n\nthe worker, pid %s (%s samples of the worker), by thread:\n%s\n\nby shared object (self time):\n%s\n\ntop 25 symbols of the worker (self time, %% of the worker'"'"'s samples; postgres is stripped: unnamed static functions show as addresses):\n%s\n\nnamed functions of the worker by time including callees (children, self; %% of the worker'"'"'s samples):\n%s\n' \
		"$PERF_SECS" "$PERF_CPU" "$PERF_HWM" "$PERF_PROCS" "$PERF_WORKER" "$PERF_SAMPLES" "$PERF_THREADS" "$PERF_DSOS" "$PERF_TOP" "$PERF_INCL")
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
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

# --aggregate: (2) and (3) process the sentinel too, the timed part of (1) does not
STREAM_RATE=$(rate "$RECORDS" "$STREAM_SECS")
COPY_RATE=$(rate "$TOTAL" "$COPY_SECS")
PY_RATE=$(rate "$TOTAL" "$PY_SECS")
R_COPY=$(ratio "$STREAM_RATE" "$COPY_RATE")
R_PY=$(ratio "$STREAM_RATE" "$PY_RATE")

# Lines both reports share: the setup, and what the CPU column means.
report_setup()
{
	echo "commit $COMMIT; nproc $(nproc); PostgreSQL $SERVER_VERSION; librdkafka $RDKAFKA; fsync on, shared_buffers 1GB, max_wal_size 4GB, streaming.batch_memory ${BATCH_MEMORY:-64MB}"
}
# the stream worker's time: on a CPU, waiting for one, asleep
report_sched()
{
	echo "(1)'s worker, main thread: $WORKER_RUN s on a CPU, $WORKER_RQ s waiting for one (all its threads: $WORKER_RQ_ALL s),"
	echo "  asleep the rest of its life (timed part $STREAM_SECS s); (2)'s backend waited ${COPY_RQ:--} s for a CPU"
}
report_cpu_note()
{
	echo "(CPU seconds: user + system time of the process doing the work, with all its threads; python + its backend;"
	echo " the mock broker used $(awk -v a="$B0" -v b="$B1" 'BEGIN { printf "%.2f", b - a }') s more during (1) and $(awk -v a="$B2" -v b="$B3" 'BEGIN { printf "%.2f", b - a }') s during (3), on the same $(nproc) cores)"
}

# streaming.log_batches' lines: per batch, the worker's main thread until
# the commit (wall, on a CPU, planning, asleep waiting for records), and
# every Kafka fetch of the worker and its helpers summed
report_batch_times()
{
	echo
	echo "stream s batches, the worker's main thread until the commit (ms; streaming.log_batches):"
	awk 'match($0, /ran batch [0-9]+:/) { b = substr($0, RSTART + 10, RLENGTH - 11); next }
		b != "" && match($0, /DETAIL:  [0-9.]+ ms: [0-9.]+ ms on a CPU, -?[0-9.]+ ms waiting for a CPU, [0-9.]+ ms to plan, [0-9.]+ ms waiting for records/) {
			split(substr($0, RSTART + 9, RLENGTH - 9), f, /[^0-9.-]+/)
			printf "  batch %-3s %7s wall %7s on a CPU %7s waiting for one %7s waiting for records %7.1f other (helpers, I/O, locks) %7s to plan\n", b, f[1], f[2], f[3], f[5], f[1] - f[2] - (f[3] > 0 ? f[3] : 0) - f[5], f[4]
			b = "" }' "$PGDATA_DIR/server.log"
	awk 'match($0, /read [0-9]+ records in [0-9.]+ ms: [0-9.]+ ms on a CPU, [0-9.]+ ms waiting for records; [0-9]+ partitions started, [0-9]+ paused, [0-9]+ fetchers woken/) {
			split(substr($0, RSTART, RLENGTH), f, /[^0-9.]+/)
			n++; wall += f[3]; cpu += f[4]; wait += f[5]; started += f[6]; paused += f[7]; woken += f[8] }
		END { if (n) printf "  Kafka fetches of the worker and its helpers: %d, %.0f ms (%.0f ms on a CPU, %.0f ms waiting for records); partitions started %d, paused %d, fetchers woken %d\n", n, wall, cpu, wait, started, paused, woken }' \
		"$PGDATA_DIR/server.log"
}

# the end of both reports: the stream's state and batches (COLUMNS: what
# $PROGRESS holds), the server log, the plans, the profile
report_end()
{
	echo "python loop: $PY_BATCHES batches; stream s: status | last batch | last_error | source_error = $STREAM_STATE; dead letters: $DEAD"
	echo
	echo "stream s batches ($1):"
	sed 's/^/  /' <<<"$PROGRESS"
	echo
	report_batch_times
	echo
	echo "server log (errors, warnings, streaming lines):"
	grep -E 'ERROR|WARNING|FATAL|PANIC|stream|streaming' "$PGDATA_DIR/server.log" | grep -v "^$(printf '\t')" |
		awk '/Kafka source ".*" read [0-9]+ records in|DETAIL:  [0-9.]+ ms: [0-9.]+ ms on a CPU/ { skip = 1; next }
			skip && / CONTEXT:  / { next } { skip = 0; print }' |
		head -40 | sed 's/^/  /'
	report_plans
	if [ -n "$PERF_OUT" ]; then
		echo
		echo "$PERF_OUT"
	fi
}

AGG_GROUP=status AGG_OTHERS=" = agg_py"
[ -n "$JOIN" ] && AGG_GROUP=country AGG_OTHERS=
# met TARGET_RATIO RATIO: "met" or "NOT met"
met() { awk -v t="$1" -v r="$2" 'BEGIN { print (r != "-" && r + 0 >= t) ? "met" : "NOT met" }'; }

# --join: the plans, (2)'s by EXPLAIN, the stream's by auto_explain
report_plans()
{
	[ -n "$JOIN" ] || return 0
	echo
	echo "(2)'s $SECOND, EXPLAIN after it ran (orders_copy of $(group "$TOTAL") rows):"
	sed 's/^/  /' "$TMP/explain_copy.txt"
	echo
	echo "plans logged by auto_explain (over 100 ms) of the stream's worker and of (2)'s INSERT:"
	# a plan is its LOG line and the tab-indented lines after it (a
	# CONTEXT line may come between); the worker's, and (2)'s INSERT
	awk 'function flush() { if (block != "" && (block ~ /streaming worker LOG/ || block ~ /Query Text: INSERT INTO (orders_join_copy|agg_copy) /)) printf "%s", block; block = "" }
		/ LOG:  duration: .* plan:/ { flush(); inplan = 1; block = $0 "\n"; next }
		/^\t/ || (inplan && / CONTEXT:  /) { if (inplan) block = block $0 "\n"; next }
		{ flush(); inplan = 0 }
		END { flush() }' "$PGDATA_DIR/server.log" | head -80 | sed 's/^/  /'
}

if [ -z "$AGG" ]; then
{
	echo
	if [ -n "$DEDUP" ]; then
		echo "streaming dedup benchmark: $(group "$RECORDS") JSON order records (avg $AVG_LEN bytes, $JSON_BYTES bytes), unique order_ids,"
		echo "  stream s with dedup_keys => ARRAY['order_id'] (no watermark: every key kept);"
	elif [ -n "$JOIN" ]; then
		echo "streaming join benchmark: $(group "$RECORDS") JSON order records (avg $AVG_LEN bytes, $JSON_BYTES bytes)"
		echo "  joined to users ($(group "$USERS") rows, user_id primary key, ANALYZEd): the user's name and country added, typed sink of 7 columns;"
	else
		echo "streaming benchmark: $(group "$RECORDS") JSON order records (avg $AVG_LEN bytes, $JSON_BYTES bytes),"
	fi
	echo "  topic of $PARTITIONS partitions ($PER_PART records each, compression $COMPRESSION) on the mock broker, produced by kcat in ${PRODUCE_SECS}s"
	echo "  source max_offsets_per_trigger ${MAX_OFFSETS:-none}; stream parallel_workers $PARALLEL_WORKERS"
	report_setup
	echo "load average before $LOAD_BEFORE, after $LOAD_AFTER (other work on the machine skews the numbers)"
	echo
	TWO_STEP=$JOIN$DEDUP
	W=52; [ -n "$TWO_STEP" ] && W=56
	printf "%-${W}s %8s %11s  %-13s %s\n" "method" "seconds" "records/s" "CPU seconds" "peak RSS (VmHWM)"
	if [ -z "$TWO_STEP" ]; then
	printf '%-52s %8s %11s  %-13s %s\n' "(1) streaming: stream s, background worker" "$STREAM_SECS" \
		"$(group "$STREAM_RATE")" "$WORKER_CPU" "$(mb "$WORKER_HWM") worker (pid $WORKER_PID)"
	printf '%-52s %8s %11s  %-13s %s\n' "(2) COPY orders_copy FROM file (FORMAT csv)" "$COPY_SECS" \
		"$(group "$COPY_RATE")" "$COPY_CPU" "$(mb "$COPY_HWM") backend"
	printf '%-52s %8s %11s  %-13s %s\n' "(3) bench/python_loop.py (confluent_kafka+psycopg2)" "$PY_SECS" \
		"$(group "$PY_RATE")" "$PY_CPU + $PY_BACKEND_CPU" "$(mb "$PY_RSS_KB") python + $(mb "$PY_BACKEND_KB") backend"
	report_cpu_note
	report_sched
	echo
	printf 'stream / COPY    %s\n' "$R_COPY"
	printf 'stream / python  %s\n' "$R_PY"
	else
	printf '%-56s %8s %11s  %-13s %s\n' "(1) streaming: ${JOIN:+join }${DEDUP:+dedup }stream s, background worker" "$STREAM_SECS" \
		"$(group "$STREAM_RATE")" "$WORKER_CPU" "$(mb "$WORKER_HWM") worker (pid $WORKER_PID)"
	printf '%-56s %8s %11s  %-13s %s\n' "(2) COPY ($COPY_ONLY_SECS s) + $SECOND ($GROUP_SECS s)" "$COPY_SECS" \
		"$(group "$COPY_RATE")" "$COPY_CPU" "$(mb "$COPY_HWM") backend"
	echo "(3) python loop: not run with ${JOIN:+--join}${DEDUP:+--dedup}"
	echo "(CPU seconds: user + system time of the process doing the work, with all its threads;"
	echo " the mock broker used $(awk -v a="$B0" -v b="$B1" 'BEGIN { printf "%.2f", b - a }') s more during (1), on the same $(nproc) cores)"
	report_sched
	echo
	if [ -n "$JOIN" ]; then
	printf 'stream / (COPY + %s)  %-6s (target >= 0.8: %s)\n' "$SECOND" "$R_COPY" "$(met 0.8 "$R_COPY")"
	else
	printf 'stream / (COPY + %s)  %s\n' "$SECOND" "$R_COPY"
	fi
	fi
	echo
	if [ -z "$CHECK_FAIL" ] && [ "$DIFF_ROWS" = 0 ]; then
		if [ -n "$TWO_STEP" ]; then
			echo "checked: each table holds exactly the $(group "$RECORDS") records (count, distinct order_id, sum(amount) = $EXPECT_SUM); stream rows = COPY + $SECOND rows (all columns, EXCEPT ALL both ways)"
		else
			echo "checked: each table holds exactly the $(group "$RECORDS") records (count, distinct order_id, sum(amount) = $EXPECT_SUM); stream rows = COPY rows"
		fi
	else
		echo "CHECK FAILED: ${CHECK_FAIL:-} ${DIFF_ROWS} rows differ between orders_stream and $REF"
	fi
	report_end "batch_id | input rows | bad rows | duration | rows/s"
}
else
{
	echo
	echo "streaming aggregate benchmark: $(group "$RECORDS") JSON order records + 1 sentinel (avg $AVG_LEN bytes, $JSON_BYTES bytes),"
	if [ -n "$JOIN" ]; then
		echo "  joined to users ($(group "$USERS") rows, user_id primary key, ANALYZEd): count and sum(amount) per user's country,"
		echo "  event times in order (37 ms apart, jitter < 2 min), 5-minute tumbling windows by country, watermark 10 minutes;"
	else
		echo "  event times in order (37 ms apart, jitter < 2 min), 5-minute tumbling windows by status, watermark 10 minutes;"
	fi
	echo "  topic of $PARTITIONS partitions ($PER_PART records each, compression $COMPRESSION) on the mock broker, produced by kcat in ${PRODUCE_SECS}s"
	echo "  source max_offsets_per_trigger ${MAX_OFFSETS:-none}; stream parallel_workers $PARALLEL_WORKERS"
	report_setup
	echo "load average (1 min) at the start of (1) $LOAD_1, (2) $LOAD_2, (3) $LOAD_3; before $LOAD_BEFORE, after $LOAD_AFTER"
	echo "  (other work on the machine skews the numbers)"
	echo
	printf '%-56s %8s %11s  %-13s %s\n' "method" "seconds" "records/s" "CPU seconds" "peak RSS (VmHWM)"
	printf '%-56s %8s %11s  %-13s %s\n' "(1) streaming: aggregate stream s, append, worker" "$STREAM_SECS" \
		"$(group "$STREAM_RATE")" "$WORKER_CPU" "$(mb "$WORKER_HWM") worker (pid $WORKER_PID; $WORKER_HWM kB)"
	printf '%-56s %8s %11s  %-13s %s\n' "(2) COPY ($COPY_ONLY_SECS s) + $SECOND ($GROUP_SECS s)" "$COPY_SECS" \
		"$(group "$COPY_RATE")" "$COPY_CPU" "$(mb "$COPY_HWM") backend"
	if [ -z "$JOIN" ]; then
	printf '%-56s %8s %11s  %-13s %s\n' "(3) python_loop.py --aggregate (COPY + ON CONFLICT)" "$PY_SECS" \
		"$(group "$PY_RATE")" "$PY_CPU + $PY_BACKEND_CPU" "$(mb "$PY_RSS_KB") python + $(mb "$PY_BACKEND_KB") backend"
	report_cpu_note
	report_sched
	echo
	printf 'stream / (COPY + GROUP BY)  %-6s (target >= 1.0: %s)\n' "$R_COPY" "$(met 1.0 "$R_COPY")"
	printf 'stream / python             %-6s (target >= 5.0: %s)\n' "$R_PY" "$(met 5.0 "$R_PY")"
	else
	echo "(3) python loop: not run with --join"
	echo "(CPU seconds: user + system time of the process doing the work, with all its threads;"
	echo " the mock broker used $(awk -v a="$B0" -v b="$B1" 'BEGIN { printf "%.2f", b - a }') s more during (1), on the same $(nproc) cores)"
	report_sched
	echo
	printf 'stream / (COPY + %s)  %s\n' "$SECOND" "$R_COPY"
	fi
	printf 'worker peak RSS             %s kB at %s records (compare across --records)\n' "$WORKER_HWM" "$(group "$RECORDS")"
	printf 'after the timed part: the sentinel produced, process_available again took %s s (untimed)\n' \
		"$(cat "$TMP/catch_up_secs" 2>/dev/null || echo -)"
	echo
	if [ -z "$CHECK_FAIL" ]; then
		echo "checked: $AGG_ROWS result rows ($AGG_WINDOWS windows x $AGG_GROUP) in agg_stream = agg_copy$AGG_OTHERS for the windows closed by"
		echo "  the final watermark $FINAL_WM (EXCEPT ALL both ways, 0 rows); they count all $(group "$RECORDS") orders, sum(amount) = $EXPECT_SUM;"
		echo "  only the sentinel's window is open; late rows: $LATE_ROWS; every record went through the stream once"
	else
		echo "CHECK FAILED (name ok ...):"
		sed 's/^/  /' <<<"$CHECK_FAIL"
	fi
	echo "checks (name ok values...):"
	sed 's/^/  /' <<<"$CHECKS"
	report_end "batch_id | input rows | output rows | late rows | state rows | duration | rows/s | watermark"
}
fi

if [ -n "$CHECK_FAIL" ] || [ "$DIFF_ROWS" != 0 ]; then
	exit 1
fi
exit 0
