#!/usr/bin/env bash
# bench/nexmark/run.sh: Nexmark queries as streams, in events per second per
# core beside Flink's published figures (issue 21).  By hand, not in CI.
#
# One private server (test/pg_env.sh: a copy of PostgreSQL 15 with this
# checkout installed into it; fsync on, shared_buffers 1GB, max_wal_size
# 4GB) and the embedded mock broker.  bench/nexmark/generate.c (built here
# with gcc) writes --events Nexmark events (92% bids, 6% auctions, 2%
# persons; see its header for the model and what differs from the Java
# generators) over --span seconds of event time; they are produced
# lz4-compressed to the topics person, auction and bid (enough partitions
# for the mock's 5 MiB each, checked to have kept everything), and read by
# three Kafka sources of those names with the events' typed columns.
#
# Each query is one stream over the source bid (q3 and q8: over auction
# and person), run on its own from the topics' start: timed from create_stream until process_available returns,
# and its CPU is that of every process of the server (the stream's worker
# and its librdkafka threads, its helpers with --parallel-workers, the
# WAL writer, checkpointer, autovacuum, and the session waiting in
# process_available): user + system time, the exited children's included
# (the postmaster's cutime).  events/s/core = the bid events the stream
# read / those CPU seconds (q3, q8: the auction and person events read).  The mock broker's CPU is shown on its own (it
# stands for the Kafka brokers; Flink's figures come from its in-process
# generator, with no broker at all).
#
#   q0  pass through: SELECT auction, bidder, price, date_time, extra FROM bid
#   q1  currency conversion: 0.908 * price
#   q2  selection: WHERE auction % 123 = 0
#   q5  hot items: bids per auction in sliding windows of 10 s every 2 s
#       (append mode, watermark 4 s), and per window the auctions with the
#       most, by a sink_function called with each batch's closed windows
#       (a stream has one aggregation; all the groups of a window close in
#       the same batch, so the maximum per window is complete there)
#   q7  highest bid: per tumbling window of 10 s the bid of the highest
#       price, as max() of an array whose first element is the price
#       zero-padded (one bid per window: Flink's q7 returns every bid of
#       that price, and one at the window's end in two windows)
#   q3  local item suggestion: auctions of category 10 joined with their
#       sellers of OR, ID or CA (an inner join of two sources, unbounded
#       state as in Flink's q3: create_stream warns about it)
#   q8  monitor new users: persons joined with their auctions of the same
#       10-second tumbling window (equal windows: state evicted at the
#       watermark), one row per person and window (GROUP BY in append mode)
#
# Sinks are tables (Flink's figures use a blackhole sink): a stream writes
# every output row durably, in its batch's transaction.  Checked: q0 and q1
# hold one row per bid, q2, q3 and q8 the generator's counts, q5's and q7's closed
# windows the results of the same query run as plain SQL over q0's table
# (when q0 ran).
#
# Flink's figures: the nexmark/nexmark README, Flink 1.13, 8 TaskManagers
# of one slot, 100M events at 10M/s, datagen source, blackhole sinks:
# Throughput/Cores counts all 100M events (bids 92% of them).
#
# Options:
#   --events N            events to generate (default 1000000)
#   --span S              seconds of event time they cover (default 60;
#                         Flink's run covers 10: 100M events at 10M/s)
#   --queries LIST        comma-separated (default q0,q1,q2,q3,q5,q7,q8)
#   --parallel-workers N  each stream's parallel_workers (default 0)
#   --perf                perf record -g the worker of each query and print
#                         its top symbols (root)
#   --keep                keep the temp dir (data, server log, perf data)
# As root it runs the server as user postgres; kcat and
# python3-confluent-kafka are installed when missing (bench/lib.sh).
set -uo pipefail

EVENTS=1000000
SPAN=60
QUERIES=q0,q1,q2,q3,q5,q7,q8
PARALLEL_WORKERS=0
PERF=
KEEP=
while [ $# -gt 0 ]; do
	case $1 in
		--events) EVENTS=$2; shift 2 ;;
		--span) SPAN=$2; shift 2 ;;
		--queries) QUERIES=$2; shift 2 ;;
		--parallel-workers) PARALLEL_WORKERS=$2; shift 2 ;;
		--perf) PERF=1; shift ;;
		--keep) KEEP=1; shift ;;
		-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
		*) echo "bench/nexmark/run.sh: unknown argument \"$1\"" >&2; exit 2 ;;
	esac
done
case $EVENTS in ''|*[!0-9]*|0) echo "bench/nexmark/run.sh: --events wants a positive integer" >&2; exit 2 ;; esac
case $SPAN in ''|*[!0-9]*|0) echo "bench/nexmark/run.sh: --span wants a positive integer" >&2; exit 2 ;; esac
case $PARALLEL_WORKERS in ''|*[!0-9]*) echo "bench/nexmark/run.sh: --parallel-workers wants an integer" >&2; exit 2 ;; esac

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BENCH=$(dirname "$HERE")
. "$BENCH/lib.sh"
bench_init bench/nexmark/run.sh

# ---- events -----------------------------------------------------------------
gcc -O2 -Wall -o "$STM_TMP/generate" "$HERE/generate.c" -lm || die "could not build generate.c"
RATE=$(echo "$EVENTS / $SPAN" | bc -l)
say "generating $EVENTS events over $SPAN s of event time"
read -r N_PERSON N_AUCTION N_BID N_Q2 N_Q3 N_Q8 < <("$STM_TMP/generate" "$EVENTS" "$RATE" 1704067200000 1 "$DATA") ||
	die "generate failed"

# produce_topic NAME FILE COUNT: lz4-compressed, to enough partitions that
# the mock keeps everything (5 MiB each, lz4 keeps about half of these
# bytes), and checked
produce_topic()
{
	local name=$1 file=$2 count=$3 parts
	parts=$(( $(stat -c %s "$file") / (4 * 1024 * 1024) + 4 ))
	kafka_create_topic "$name" "$parts" || return 1
	kafka_produce "$name" -z lz4 -l "$file" || return 1
	bench_check_topic "$name" "$count"
}
produce_topic person "$DATA/person.jsonl" "$N_PERSON" &&
	produce_topic auction "$DATA/auction.jsonl" "$N_AUCTION" &&
	produce_topic bid "$DATA/bid.jsonl" "$N_BID" || die "producing failed"

# ---- server -----------------------------------------------------------------
bench_server_start
psql_do -c "CREATE EXTENSION streaming" >/dev/null || die "CREATE EXTENSION failed"
psql_do >/dev/null <<EOF || die "could not create the sources"
SELECT streaming.create_kafka_source('person', '$BOOTSTRAP', topics => ARRAY['person'], starting_offsets => 'earliest',
  columns => 'id bigint, name text, email_address text, credit_card text, city text, state text, date_time timestamptz, extra text');
SELECT streaming.create_kafka_source('auction', '$BOOTSTRAP', topics => ARRAY['auction'], starting_offsets => 'earliest',
  columns => 'id bigint, item_name text, description text, initial_bid bigint, reserve bigint, date_time timestamptz,
              expires timestamptz, seller bigint, category bigint, extra text');
SELECT streaming.create_kafka_source('bid', '$BOOTSTRAP', topics => ARRAY['bid'], starting_offsets => 'earliest',
  columns => 'auction bigint, bidder bigint, price bigint, channel text, url text, date_time timestamptz, extra text');
-- q5: per window, the auctions with the most bids (all of a window's groups close in one batch)
CREATE TABLE nexmark_q5 (window_start timestamptz, window_end timestamptz, auction bigint, num bigint);
CREATE FUNCTION nexmark_q5_hot(batch_id bigint, batch regclass) RETURNS void LANGUAGE plpgsql AS \$\$
BEGIN
    EXECUTE format(\$q\$
        INSERT INTO nexmark_q5
        SELECT b.window_start, b.window_end, b.auction, b.num
          FROM %1\$s b JOIN (SELECT window_start, max(num) AS maxn FROM %1\$s GROUP BY window_start) m
            ON m.window_start = b.window_start AND b.num >= m.maxn\$q\$, batch);
END \$\$;
EOF

# ---- CPU --------------------------------------------------------------------
HZ=$(getconf CLK_TCK)
# server_cpu: CPU seconds of every process of the server so far: the
# postmaster's own and its exited children's, and each live child's (all
# its threads)
server_cpu()
{
	local pm
	pm=$(head -n 1 "$PGDATA/postmaster.pid")
	{
		awk '{ sub(/^.*\) /, ""); print $12 + $13 + $14 + $15 }' "/proc/$pm/stat"
		for p in $(cat "/proc/$pm/task/$pm/children"); do
			awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$p/stat" 2>/dev/null
		done
	} | awk -v hz="$HZ" '{ t += $1 } END { printf "%.2f", t / hz }'
}
cpu_s() { awk -v hz="$HZ" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null; }
now() { date +%s.%N; }

# ---- queries ----------------------------------------------------------------
# always given: NULL (automatic) would take helpers where the shape allows
PW=", parallel_workers => $PARALLEL_WORKERS"

# query NAME: "sql|create_stream's other arguments"
query_of()
{
	case $1 in
		q0) echo 'SELECT auction, bidder, price, date_time, extra FROM bid|' ;;
		q1) echo 'SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid|' ;;
		q2) echo 'SELECT auction, price FROM bid WHERE auction % 123 = 0|' ;;
		q5) echo "SELECT streaming.window_start() AS window_start, streaming.window_end() AS window_end,
		             auction, count(*) AS num
		        FROM bid GROUP BY streaming.hop(date_time, '10 seconds', '2 seconds'), auction|, output_mode => 'append', watermark => '4 seconds', sink_function => 'nexmark_q5_hot(bigint, regclass)'" ;;
		q7) echo "SELECT streaming.window_start() AS window_start, streaming.window_end() AS window_end,
		             max(ARRAY[lpad(price::text, 20, '0'), auction::text, bidder::text,
		                       to_char(date_time AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"'), extra]) AS top
		        FROM bid GROUP BY streaming.tumble(date_time, '10 seconds')|, output_mode => 'append', watermark => '4 seconds'" ;;
		q3) echo "SELECT p.name, p.city, p.state, a.id
		        FROM auction a JOIN person p ON a.seller = p.id
		       WHERE a.category = 10 AND p.state IN ('OR', 'ID', 'CA')|" ;;
		q8) echo "SELECT p.id, p.name, streaming.window_start() AS starttime
		        FROM person p JOIN auction a ON p.id = a.seller
		         AND streaming.tumble(p.date_time, '10 seconds') = streaming.tumble(a.date_time, '10 seconds')
		       GROUP BY p.id, p.name, streaming.tumble(p.date_time, '10 seconds')|, output_mode => 'append',
		       watermarks => '{\"p\": {\"event_time\": \"date_time\", \"delay\": \"4 seconds\"}, \"a\": {\"event_time\": \"date_time\", \"delay\": \"4 seconds\"}}'" ;;
		*) return 1 ;;
	esac
}

# check NAME: the stream's results are right (prints what is wrong)
check()
{
	local q=$1 n
	case $q in
		q0|q1)
			n=$(psql_do -c "SELECT count(*) FROM nexmark_$q")
			[ "$n" = "$N_BID" ] || { echo "nexmark_$q holds $n rows, not $N_BID"; return 1; } ;;
		q2|q3)
			n=$(psql_do -c "SELECT count(*) FROM nexmark_$q")
			want=N_${q^^}
			[ "$n" = "${!want}" ] || { echo "nexmark_$q holds $n rows, not ${!want}"; return 1; } ;;
		q8)
			# its windows close at the watermark: all but the last ones are out
			n=$(psql_do -c "SELECT count(*) FROM nexmark_q8")
			[ "$n" -gt 0 ] && [ "$n" -le "$N_Q8" ] || { echo "nexmark_q8 holds $n rows, not 1..$N_Q8"; return 1; }
			[ "$(psql_do -c "SELECT count(*) = count(DISTINCT id) FROM nexmark_q8")" = t ] ||
				{ echo "nexmark_q8 has a person twice"; return 1; } ;;
		q5)
			[ "$(psql_do -c "SELECT count(*) > 0 FROM nexmark_q5")" = t ] || { echo "nexmark_q5 is empty"; return 1; }
			[ -n "$(psql_do -c "SELECT to_regclass('nexmark_q0')")" ] || return 0
			n=$(psql_do <<'EOF'
WITH w AS (SELECT DISTINCT window_start FROM nexmark_q5),
counts AS (
  SELECT s AS window_start, b.auction, count(*) AS num
    FROM nexmark_q0 b,
         generate_series(date_bin('2 seconds', b.date_time, 'epoch') - interval '8 seconds',
                         date_bin('2 seconds', b.date_time, 'epoch'), '2 seconds') s
   WHERE s IN (SELECT window_start FROM w)
   GROUP BY 1, 2),
hot AS (SELECT window_start, auction, num
          FROM (SELECT *, max(num) OVER (PARTITION BY window_start) AS maxn FROM counts) c
         WHERE num = maxn)
SELECT count(*) FROM ((SELECT * FROM hot EXCEPT ALL SELECT window_start, auction, num FROM nexmark_q5)
                      UNION ALL
                      (SELECT window_start, auction, num FROM nexmark_q5 EXCEPT ALL SELECT * FROM hot)) d
EOF
)
			[ "$n" = 0 ] || { echo "nexmark_q5 differs from SQL over nexmark_q0 in $n rows"; return 1; } ;;
		q7)
			[ "$(psql_do -c "SELECT count(*) > 0 FROM nexmark_q7")" = t ] || { echo "nexmark_q7 is empty"; return 1; }
			[ -n "$(psql_do -c "SELECT to_regclass('nexmark_q0')")" ] || return 0
			n=$(psql_do <<'EOF'
SELECT count(*) FROM nexmark_q7 q
 WHERE q.top[1]::bigint IS DISTINCT FROM
       (SELECT max(price) FROM nexmark_q0 b WHERE b.date_time >= q.window_start AND b.date_time < q.window_end)
    OR NOT EXISTS (SELECT 1 FROM nexmark_q0 b WHERE b.price = q.top[1]::bigint AND b.auction = q.top[2]::bigint
                      AND b.bidder = q.top[3]::bigint AND b.extra = q.top[5]
                      AND b.date_time >= q.window_start AND b.date_time < q.window_end)
EOF
)
			[ "$n" = 0 ] || { echo "$n windows of nexmark_q7 do not hold their highest bid"; return 1; } ;;
	esac
}

# run_query NAME: prints "wall_s cpu_s mock_cpu_s batches" and a profile to stderr
run_query()
{
	local q=$1 spec sql args t0 t1 c0 c1 m0 m1 pid perf_pid=
	spec=$(query_of "$q") || return 1
	sql=${spec%%|*}
	args=${spec#*|}
	c0=$(server_cpu)
	m0=$(cpu_s "$MOCK_BROKER_PID")
	t0=$(now)
	psql_do -c "SELECT streaming.create_stream('nexmark_$q', \$q\$$sql\$q\$$args$PW)" >/dev/null || return 1
	if [ -n "$PERF" ]; then
		pid=
		while [ -z "$pid" ]; do pid=$(psql_do -c "SELECT worker_pid FROM streaming.streams WHERE name = 'nexmark_$q'"); done
		perf record -q -g -o "$DATA/perf.$q" -p "$pid" >/dev/null 2>&1 &
		perf_pid=$!
	fi
	psql_do -c "SELECT streaming.process_available('nexmark_$q', '30 minutes')" >/dev/null || return 1
	t1=$(now)
	c1=$(server_cpu)
	m1=$(cpu_s "$MOCK_BROKER_PID")
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid"
		say "$q: the worker's top symbols (perf record -g, self time)"
		perf report -i "$DATA/perf.$q" --no-children --sort dso,sym --percent-limit 1.5 --stdio -g none 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -n 25 >&2
	fi
	psql_do -c "SELECT streaming.stop('nexmark_$q')" >/dev/null
	echo "$(echo "$t1 - $t0" | bc -l) $(echo "$c1 - $c0" | bc -l) $(echo "$m1 - $m0" | bc -l) \
$(psql_do -c "SELECT count(*) FROM streaming.progress WHERE stream = 'nexmark_$q' AND num_input_rows > 0")"
}

# Flink 1.13's Throughput/Cores (nexmark/nexmark README)
flink_of()
{
	case $1 in
		q0) echo 155020 ;; q1) echo 157940 ;; q2) echo 175210 ;; q3) echo 152120 ;;
		q5) echo 22140 ;; q7) echo 12330 ;; q8) echo 146140 ;;
	esac
}

declare -A WALL CPU MOCK BATCHES
# events_of NAME: the events its stream reads
events_of()
{
	case $1 in
		q3|q8) echo $((N_PERSON + N_AUCTION)) ;;
		*) echo "$N_BID" ;;
	esac
}

for q in ${QUERIES//,/ }; do
	say "$q"
	read -r w c m b < <(run_query "$q") || die "$q failed"
	msg=$(check "$q") || die "$q: $msg"
	WALL[$q]=$w; CPU[$q]=$c; MOCK[$q]=$m; BATCHES[$q]=$b
done

# ---- report -----------------------------------------------------------------
echo
echo "Nexmark, $EVENTS events ($N_BID bids) over $SPAN s of event time, parallel_workers = $PARALLEL_WORKERS"
echo "(CPU: every process of the server; events/s/core: events read (bids; q3, q8: persons and auctions) / CPU s;"
echo " Flink: 100M events of all kinds / cores x s)"
printf '%-5s %9s %8s %8s %10s %14s %14s %7s %12s\n' query events batches "wall s" "server CPU" "events/s/core" \
	"Flink/core" ratio "mock CPU s"
for q in ${QUERIES//,/ }; do
	f=$(flink_of "$q")
	n=$(events_of "$q")
	per=$(echo "$n / ${CPU[$q]}" | bc -l)
	printf '%-5s %9d %8s %8.2f %10.2f %14.0f %14d %7.2f %12.2f\n' "$q" "$n" "${BATCHES[$q]}" "${WALL[$q]}" \
		"${CPU[$q]}" "$per" "$f" "$(echo "$per / $f" | bc -l)" "${MOCK[$q]}"
done
