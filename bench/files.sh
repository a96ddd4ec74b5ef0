#!/usr/bin/env bash
# bench/files.sh: the file source against server-side COPY of the same
# files, in one run (by hand, not in CI; one run at a time: it measures a
# process's memory and time).
#
# Generates N order records (bench/gen_orders.py: order_id, user_id, amount,
# status, event_time; about 52 bytes a line as CSV) and splits them into F
# CSV files.  On one private PostgreSQL 15 server (test/pg_env.sh's private
# installation, fsync on, shared_buffers as given, max_wal_size 4GB), into
# typed tables of the same shape (no indexes):
#
#   (1) the extension: a file source over the files' directory and stream
#       "s", SELECT order_id, user_id, amount, status, event_time FROM orders,
#       run by its background worker; timed from create_stream(start =>
#       true) until streaming.process_available('s') returns.  The worker's
#       peak RSS (VmHWM, which counts the shared buffers it touched) is read
#       just before it is stopped, and its private memory (RssAnon) is
#       sampled every 0.1 s while it runs (the peak is shown);
#   (2) COPY orders_copy FROM '<file>' (FORMAT csv) for each file, in one
#       session, timed together; that backend's VmHWM.
#
# after a warm-up (a COPY of all files into a table that is dropped, so
# that neither run pays for creating WAL segments), and prints rows/s of each, the ratio stream/COPY, the memory figures and
# the stream's batches.  Both tables must hold exactly the N records, and
# the same rows (EXCEPT ALL both ways).  To see that the worker's memory does
# not grow with a file's size, compare --files 1 runs of different
# --records (say 2000000, about 100 MB, and 20000000, about 1 GB) with a
# small --shared-buffers, so that the shared buffers the sink's writes
# touch do not dominate VmHWM.
#
# Options:
#   --records N         records in all (default 1000000)
#   --files F           files they are split into (default 10)
#   --max-files M       the source's max_files_per_trigger (default none:
#                       one batch reads every file)
#   --shared-buffers S  the server's shared_buffers (default 1GB)
#   --parallel-workers N  the stream's parallel_workers (default NULL:
#                       automatic); the helpers' CPU seconds are shown too
#   --dedup COLUMN      dedup_keys => ARRAY[COLUMN] (say user_id): the
#                       stream must hold the first row of each key in file
#                       order (COPY's table in its insertion order)
#   --keep              keep the temp dir (data, server log)
#
# It installs nothing into the system (as root the server runs as user
# postgres) and stops everything it started.

set -u
. "$(dirname "${BASH_SOURCE[0]}")/../test/pg_env.sh"

RECORDS=1000000
FILES=10
MAX_FILES=
SHARED_BUFFERS=1GB
PARALLEL_WORKERS=
DEDUP=
KEEP=
SAMPLER=

usage()
{
	sed -n '/^# Options:/,/^#$/p' "$0" | sed 's/^# \{0,1\}//'
}

die()
{
	stm_err "$*"
	[ -n "$SAMPLER" ] && kill "$SAMPLER" 2>/dev/null
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--files) FILES=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--max-files) MAX_FILES=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--shared-buffers) SHARED_BUFFERS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--parallel-workers) PARALLEL_WORKERS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--dedup) DEDUP=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--keep) KEEP=1; shift ;;
		-h|--help) usage; exit 0 ;;
		*) usage >&2; exit 2 ;;
	esac
done
for v in RECORDS FILES; do
	case ${!v} in ''|*[!0-9]*|0) die "--${v,,} wants a positive integer" ;; esac
done
case $MAX_FILES in ''|[1-9]|[1-9]*[0-9]) ;; *) die "--max-files wants a positive integer" ;; esac
[ "$FILES" -le "$RECORDS" ] || die "--files must not exceed --records"
case $PARALLEL_WORKERS in ''|[0-9]|[1-9][0-9]) ;; *) die "--parallel-workers wants 0 to 64" ;; esac
case $DEDUP in ''|order_id|user_id|amount|status|event_time) ;; *) die "--dedup wants a column of the orders" ;; esac

stm_setup || die "setup failed"
if [ -n "$KEEP" ]; then
	trap 'stm_err "kept $STM_TMP"; stm_kill_ours' EXIT
fi
DATA=$STM_TMP/files
mkdir -p "$DATA" && chmod 755 "$DATA" || die "mkdir failed"

echo "generating $RECORDS records in $FILES files" >&2
read -r TOTAL _ _ EXPECT_SUM < <(/usr/bin/python3 "$(dirname "${BASH_SOURCE[0]}")/gen_orders.py" \
	"$RECORDS" /dev/null "$STM_TMP/orders.csv") || die "gen_orders.py failed"
[ "$TOTAL" = "$RECORDS" ] || die "gen_orders.py wrote $TOTAL records"
# F files of whole lines, renamed in as complete files, mtimes a minute back
(cd "$STM_TMP" && split -n "l/$FILES" -d -a 3 --additional-suffix=.csv orders.csv part_) ||
	die "split failed"
rm -f "$STM_TMP/orders.csv"
for f in "$STM_TMP"/part_*.csv; do
	touch -d '1 minute ago' "$f" && mv "$f" "$DATA/" || die "could not move $f"
done
BYTES=$(du -cb "$DATA"/*.csv | tail -n 1 | cut -f1)

stm_cluster_start "$STM_TMP/pgdata" "$STM_TMP/sock" || die "could not start PostgreSQL"
cat >>"$STM_TMP/pgdata/postgresql.conf" <<EOF
shared_buffers = '$SHARED_BUFFERS'
max_wal_size = 4GB
streaming.log_batches = on
EOF
stm_run "$STM_BINDIR/pg_ctl" -D "$STM_TMP/pgdata" -l "$STM_TMP/pgdata/server.log" -w -t 60 \
	restart >/dev/null || die "could not restart PostgreSQL"

# psql_q ARGS...: psql on the private server, unaligned, no headers
psql_q()
{
	"$STM_BINDIR/psql" -X -q -At -F ' ' -v ON_ERROR_STOP=1 -h "$STM_TMP/sock" -p 5432 \
		-U "$STM_USER" -d postgres "$@"
}

COLS='order_id bigint, user_id bigint, amount numeric(10,2), status text, event_time timestamptz'
psql_q -v cols="$COLS" -v dir="$DATA" -v max_files="$MAX_FILES" <<'EOF' || die "setup failed"
CREATE EXTENSION streaming;
SELECT format('CREATE TABLE %I (%s)', t, :'cols') FROM unnest(ARRAY['orders_stream', 'orders_copy']) t
\gexec
SELECT streaming.create_file_source('orders', :'dir', columns => :'cols',
    max_files_per_trigger => nullif(:'max_files', '')::int)
\g /dev/null
EOF

kb() { awk -v k="$2" '$1 == k ":" { print $2 }' "/proc/$1/status" 2>/dev/null; }
cpu_secs()
{
	sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
		awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}

# sample_anon: the largest RssAnon of the stream's worker, sampled every
# 0.1 s until it is gone, into $STM_TMP/anon
sample_anon()
{
	local pid= max=0 v
	while :; do
		[ -z "$pid" ] && pid=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = 's'" 2>/dev/null)
		if [ -n "$pid" ]; then
			v=$(kb "$pid" RssAnon)
			[ -z "$v" ] && break
			[ "$v" -gt "$max" ] && max=$v
			echo "$max" >"$STM_TMP/anon"
		fi
		[ -f "$STM_TMP/stream_done" ] && break
		sleep 0.1	# the sampling interval
	done
}

# ---- warm-up ---------------------------------------------------------------

# The first large load of a fresh server also creates its WAL segments; the
# later ones reuse them (recycled at checkpoints).  One COPY of all files,
# thrown away, first: so neither measured run pays for that.
echo "warm-up: COPY into a table that is dropped" >&2
psql_q -v dir="$DATA" -v cols="$COLS" <<'EOF' || die "warm-up failed"
SELECT format('CREATE TABLE orders_warm (%s)', :'cols')
\gexec
SELECT format('COPY orders_warm FROM %L (FORMAT csv)', :'dir' || '/' || f)
FROM pg_ls_dir(:'dir') f ORDER BY f
\gexec
DROP TABLE orders_warm;
CHECKPOINT;
EOF

# ---- (1) the stream --------------------------------------------------------

echo "(1) stream" >&2
sample_anon &
SAMPLER=$!
STREAM_SECS=$(psql_q -v pw="$PARALLEL_WORKERS" -v dedup="$DEDUP" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT streaming.create_stream('s', 'SELECT order_id, user_id, amount, status, event_time FROM orders',
    sink => 'orders_stream', start => true, parallel_workers => nullif(:'pw', '')::int,
    dedup_keys => CASE WHEN :'dedup' <> '' THEN ARRAY[:'dedup'] END)
\g /dev/null
SELECT streaming.process_available('s', '30 minutes')
\g /dev/null
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3);
EOF
) || die "the stream failed: $(tail -n 20 "$STM_TMP/pgdata/server.log")"
WORKER=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = 's'")
WORKER_HWM=$(kb "$WORKER" VmHWM)
WORKER_CPU=$(cpu_secs "$WORKER")
HELPERS_CPU=0
for h in $(psql_q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'streaming helper'"); do
	HELPERS_CPU=$(awk -v a="$HELPERS_CPU" -v b="$(cpu_secs "$h")" 'BEGIN { printf "%.2f", a + b }')
done
touch "$STM_TMP/stream_done"
wait "$SAMPLER"
SAMPLER=
WORKER_ANON=$(cat "$STM_TMP/anon" 2>/dev/null || echo 0)
psql_q -c "SELECT streaming.stop('s')" >/dev/null

# ---- (2) COPY --------------------------------------------------------------

echo "(2) COPY" >&2
read -r COPY_SECS COPY_HWM COPY_CPU < <(psql_q -v dir="$DATA" -v hz="$(getconf CLK_TCK)" <<'EOF'
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
SELECT format('COPY orders_copy FROM %L (FORMAT csv)', :'dir' || '/' || f)
FROM pg_ls_dir(:'dir') f ORDER BY f
\gexec
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 3),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+)'),
       (SELECT round((f[12]::bigint + f[13]::bigint) / :hz::numeric, 2)
        FROM string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f);
EOF
) || die "COPY failed"

# ---- checks and report -----------------------------------------------------

RECORDS_OUT=
if [ -n "$DEDUP" ]; then
	# the first row of each key in file order: COPY's rows in insertion order
	CHECKS=$(psql_q -v key="$DEDUP" <<'EOF'
SELECT format('CREATE TABLE orders_first AS SELECT DISTINCT ON (%I) order_id, user_id, amount, status, event_time '
              'FROM (SELECT *, ctid AS c FROM orders_copy) o ORDER BY %I, c', :'key', :'key')
\gexec
SELECT 'first_rows', count(*) = 0 FROM ((TABLE orders_stream EXCEPT ALL TABLE orders_first)
    UNION ALL (TABLE orders_first EXCEPT ALL TABLE orders_stream)) d;
EOF
) || die "checking the tables failed"
	RECORDS_OUT=$(psql_q -c "SELECT count(*) FROM orders_stream")
else
CHECKS=$(psql_q -v n="$RECORDS" -v sum="$EXPECT_SUM" <<'EOF'
SELECT t, count(*) = :n AND count(DISTINCT order_id) = :n AND sum(amount) = :sum
FROM (SELECT 'stream' t, order_id, amount FROM orders_stream
      UNION ALL SELECT 'copy', order_id, amount FROM orders_copy) x
GROUP BY t ORDER BY t;
SELECT 'same_rows', count(*) = 0 FROM ((TABLE orders_stream EXCEPT ALL TABLE orders_copy)
    UNION ALL (TABLE orders_copy EXCEPT ALL TABLE orders_stream)) d;
EOF
) || die "checking the tables failed"
fi

printf '\n%d records in %d files, %s MB of CSV; shared_buffers %s%s\n' "$RECORDS" "$FILES" \
	"$(awk -v b="$BYTES" 'BEGIN { printf "%.0f", b / 1048576 }')" "$SHARED_BUFFERS" \
	"${MAX_FILES:+; max_files_per_trigger $MAX_FILES}"
printf 'parallel_workers %s%s; helpers CPU s %s\n' "${PARALLEL_WORKERS:-NULL (automatic)}" \
	"${DEDUP:+; dedup_keys $DEDUP: $RECORDS_OUT rows kept}" "$HELPERS_CPU"
awk -v n="$RECORDS" -v s="$STREAM_SECS" -v c="$COPY_SECS" -v wh="$WORKER_HWM" -v wa="$WORKER_ANON" \
	-v wc="$WORKER_CPU" -v ch="$COPY_HWM" -v cc="$COPY_CPU" 'BEGIN {
	printf "%-22s %10s %12s %10s %14s %16s\n", "", "seconds", "rows/s", "CPU s", "peak RSS (MB)", "peak private (MB)"
	printf "%-22s %10.2f %12.0f %10.2f %14.0f %16.0f\n", "file stream (worker)", s, n / s, wc, wh / 1024, wa / 1024
	printf "%-22s %10.2f %12.0f %10.2f %14.0f %16s\n", "COPY (backend)", c, n / c, cc, ch / 1024, "-"
	printf "stream / COPY: %.2f\n", c / s
}'
echo
echo "batches of the stream:"
psql_q -F ' | ' -c "SELECT batch_id, num_input_rows, num_bad_rows, duration,
	round(processed_rows_per_second) AS rows_per_s,
	(SELECT count(*) FROM jsonb_object_keys(end_positions)) AS files
	FROM streaming.progress WHERE stream = 's' ORDER BY batch_id"
echo
echo "checks: $(tr '\n' ' ' <<<"$CHECKS")"
grep -q ' f$' <<<"$CHECKS" && die "a table does not hold the expected records"
exit 0
