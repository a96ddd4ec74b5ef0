#!/usr/bin/env bash
# bench/rate.sh: a rate-source stream with and without parallel helpers, in
# one run (by hand, not in CI).
#
# On one private PostgreSQL 15 server (test/pg_env.sh, fsync on), a rate
# source of 10^9 values a second (so every batch after the first takes the
# most a batch takes, 100000 values, whenever it runs: the streams read the
# same values) and, for each parallel_workers given (default "0 2"), in
# turn, repeated --runs times interleaved (0 2, 2 0, 0 2, ...): a stream
# "SELECT value, partition, value % 7 AS m FROM r" (or with --dedup,
# dedup_keys => ARRAY['timestamp']: 1000 values to a microsecond, so the
# first of each is kept) run by its worker until it has read --values
# values (process_available cannot end: the rate never stops; it is
# stopped once its positions pass the mark).  Prints, per run, the seconds
# from start to the mark, values/s, the worker's and the helpers' CPU
# seconds, and per setting the median and range.
#
# Options:
#   --values N        values each stream reads (default 2000000)
#   --partitions P    the rate source's num_partitions (default 3)
#   --workers "A B"   the parallel_workers to compare (default "0 2")
#   --runs R          runs of each (default 3)
#   --dedup           the dedup shape
set -u
. "$(dirname "${BASH_SOURCE[0]}")/../test/pg_env.sh"

VALUES=2000000
PARTITIONS=3
WORKERS="0 2"
RUNS=3
DEDUP=
while [ $# -gt 0 ]; do
	case $1 in
		--values) VALUES=${2:-}; shift 2 || exit 2 ;;
		--partitions) PARTITIONS=${2:-}; shift 2 || exit 2 ;;
		--workers) WORKERS=${2:-}; shift 2 || exit 2 ;;
		--runs) RUNS=${2:-}; shift 2 || exit 2 ;;
		--dedup) DEDUP=1; shift ;;
		-h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
		*) echo "bench/rate.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
for v in VALUES PARTITIONS RUNS; do
	case ${!v} in ''|*[!0-9]*|0) stm_err "--${v,,} wants a positive integer"; exit 2 ;; esac
done

stm_setup || exit 1
stm_cluster_start "$STM_TMP/pgdata" "$STM_TMP/sock" || { stm_err "could not start PostgreSQL"; exit 1; }
psql_q()
{
	"$STM_BINDIR/psql" -X -q -At -F ' ' -v ON_ERROR_STOP=1 -h "$STM_TMP/sock" -p 5432 \
		-U "$STM_USER" -d postgres "$@"
}
cpu_secs()
{
	sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
		awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}
psql_q -c "CREATE EXTENSION streaming" -c "SELECT streaming.create_rate_source('r', 1000000000, num_partitions => $PARTITIONS)" >/dev/null ||
	{ stm_err "setup failed"; exit 1; }

RESULTS=$STM_TMP/results
: >"$RESULTS"
n=0
for run in $(seq 1 "$RUNS"); do
	order=$WORKERS
	[ $((run % 2)) = 0 ] && order=$(echo "$WORKERS" | tr ' ' '\n' | tac | tr '\n' ' ')
	for w in $order; do
		n=$((n + 1))
		s="s$n"
		psql_q -v s="$s" -v w="$w" -v dedup="$DEDUP" >/dev/null <<'SQL' || { stm_err "create_stream failed"; exit 1; }
CHECKPOINT;
SELECT streaming.create_stream(:'s', 'SELECT value, partition, value % 7 AS m FROM r', parallel_workers => :w,
    dedup_keys => CASE WHEN :'dedup' <> '' THEN ARRAY['timestamp'] END, start => false);
SQL
		t0=$(date +%s.%N)
		psql_q -c "SELECT streaming.start('$s')" >/dev/null
		until [ "$(psql_q -c "SELECT coalesce(sum(committed_offset), 0) >= $VALUES FROM streaming.source_lag WHERE stream = '$s'")" = t ]; do
			sleep 0.05	# polling: the stream never ends by itself
		done
		t1=$(date +%s.%N)
		wpid=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = '$s'")
		wcpu=$(cpu_secs "$wpid")
		hcpu=0
		for h in $(psql_q -c "SELECT pid FROM pg_stat_activity WHERE backend_type = 'streaming helper'"); do
			hcpu=$(awk -v a="$hcpu" -v b="$(cpu_secs "$h")" 'BEGIN { printf "%.2f", a + b }')
		done
		psql_q -c "SELECT streaming.stop('$s')" >/dev/null
		until [ "$(psql_q -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type IN ('streaming worker', 'streaming helper')")" = 0 ]; do
			sleep 0.05
		done
		wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
		printf '%s %s %s %s %s\n' "$w" "$wall" "$VALUES" "$wcpu" "$hcpu" >>"$RESULTS"
		printf 'run %d parallel_workers %s: %s s to %s values (%.0f values/s), worker CPU %s s, helpers CPU %s s\n' \
			"$run" "$w" "$wall" "$VALUES" "$(awk -v v="$VALUES" -v s="$wall" 'BEGIN { print v / s }')" "$wcpu" "$hcpu"
		psql_q -c "SELECT streaming.drop_stream('$s', drop_sink => true)" >/dev/null
	done
done
echo
echo "per parallel_workers: median (min..max) of seconds, worker CPU s, helpers CPU s"
for w in $WORKERS; do
	awk -v w="$w" '$1 == w { print $2, $4, $5 }' "$RESULTS" | python3 -c '
import sys, statistics
rows = [list(map(float, l.split())) for l in sys.stdin]
cols = list(zip(*rows))
print(sys.argv[1], *["%.2f (%.2f..%.2f)" % (statistics.median(c), min(c), max(c)) for c in cols])' "$w"
done
exit 0
