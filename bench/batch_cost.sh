#!/usr/bin/env bash
# bench/batch_cost.sh: what one batch of a continuous stream costs its
# worker, over minutes (by hand, not in CI).
#
# A continuous stream runs a batch for every few records, so what a batch
# does besides its records (its transaction, the catalog rows it reads and
# writes, its progress row and the trim of old ones, the commit) is most
# of its worker's CPU and of its latency; and a cost that grows with what
# earlier batches left behind (dead rows until a VACUUM) shows only after
# thousands of them.  On one private PostgreSQL 15 server (test/pg_env.sh,
# fsync on, autovacuum as by default), a rate source of --rate values a
# second and the stream "SELECT value FROM r" with trigger 'continuous';
# every --every seconds for --seconds, it prints the batches run, batches
# a second, the worker's CPU milliseconds per batch (user + system over the
# interval) and the dead rows of streaming.batches.  Run it from two
# checkouts (each installs its own build) to compare them; on a shared
# machine compare CPU per batch, not batches a second.
#
# Options:
#   --rate R      values a second (default 20000)
#   --seconds S   how long (default 120)
#   --every E     interval between samples (default 15)
#   --window      the stream is a 1-minute tumbling window in update mode,
#                 grouped by the window and value % 1000 (its batches merge
#                 their groups into the state table and upsert the sink)
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../test/pg_env.sh"

RATE=20000
SECS=120
EVERY=15
QUERY='SELECT value FROM r'
OPTS=
while [ $# -gt 0 ]; do
	case $1 in
		--rate) RATE=${2:-}; shift 2 || exit 2 ;;
		--seconds) SECS=${2:-}; shift 2 || exit 2 ;;
		--every) EVERY=${2:-}; shift 2 || exit 2 ;;
		--window) QUERY="SELECT streaming.window_start() AS ws, value % 1000 AS k, count(*) AS n, sum(value) AS total FROM r GROUP BY streaming.tumble(\"timestamp\", '1 minute'), value % 1000"
			OPTS=", output_mode => 'update'"; shift ;;
		-h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
		*) echo "bench/batch_cost.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
for v in RATE SECS EVERY; do
	case ${!v} in ''|*[!0-9]*|0) stm_err "--${v,,} wants a positive integer"; exit 2 ;; esac
done

stm_setup || exit 1
stm_cluster_start "$STM_TMP/pgdata" "$STM_TMP/sock" "fsync = on" ||
	{ stm_err "could not start PostgreSQL"; exit 1; }
psql_q()
{
	"$STM_BINDIR/psql" -X -q -At -F ' ' -v ON_ERROR_STOP=1 -h "$STM_TMP/sock" -p 5432 \
		-U "$STM_USER" -d postgres "$@"
}
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'; }
last_batch() { psql_q -c "SELECT coalesce(max(batch_id), 0) FROM streaming.progress WHERE stream = 'c'"; }

psql_q -c "CREATE EXTENSION streaming" -c "SELECT streaming.create_rate_source('r', $RATE)" \
	-c "SELECT streaming.create_stream('c', \$q\$$QUERY\$q\$, trigger => 'continuous', start => true$OPTS)" \
	>/dev/null || { stm_err "setup failed"; exit 1; }
pid=
until [ -n "$pid" ]; do
	pid=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = 'c' AND status = 'running'")
	[ -n "$pid" ] || sleep 0.1
done
hz=$(getconf CLK_TCK)
b0=$(last_batch); c0=$(cpu_ticks "$pid"); t=0
printf 'rate %s values/s, %s, checkout %s, worker pid %s, load %s\n' "$RATE" "$QUERY" \
	"$(git -C "$STM_SRC" rev-parse --short HEAD 2>/dev/null)" "$pid" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%8s %10s %10s %14s %10s\n' seconds batches batches/s "CPU ms/batch" dead_rows
while [ "$t" -lt "$SECS" ]; do
	sleep "$EVERY"
	t=$((t + EVERY))
	b1=$(last_batch); c1=$(cpu_ticks "$pid")
	dead=$(psql_q -c "SELECT n_dead_tup FROM pg_stat_all_tables WHERE relid = 'streaming.batches'::regclass")
	awk -v t="$t" -v b="$((b1 - b0))" -v c="$((c1 - c0))" -v hz="$hz" -v e="$EVERY" -v d="$dead" \
		'BEGIN { printf "%8d %10d %10.0f %14.3f %10s\n", t, b, b / e, b ? c * 1000 / hz / b : 0, d }'
	b0=$b1; c0=$c1
done
exit 0
