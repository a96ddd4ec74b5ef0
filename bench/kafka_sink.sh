#!/usr/bin/env bash
# bench/kafka_sink.sh: the Kafka sink against the table sink, in one run
# (issue 11).  By hand, not in CI.
#
# One private server (test/pg_env.sh: a copy of PostgreSQL 15 with this
# checkout installed into it, so nothing is installed into the system;
# fsync on, shared_buffers 1GB, max_wal_size 4GB) and the embedded mock
# broker.  N JSON orders (bench/gen_orders.py, ~110 bytes each) are produced
# to a topic of 32 partitions; then, ROUNDS times, one after the other:
#
#   table  create_stream('table_<r>', 'SELECT order_id, user_id, amount,
#          status, event_time FROM orders'): a table sink, timed from
#          create_stream until process_available returns;
#   kafka  the same query into a Kafka sink (a topic of 32 partitions, key
#          order_id, lz4-compressed so that N messages fit in the mock's
#          5 MiB per partition), timed until process_available returns,
#          which waits for the outbox to be delivered too.  The outbox's
#          rows are sampled every 250 ms (its peak; counted by its primary
#          key, not by the view's sequential scan), and the worker's peak
#          RSS (VmHWM, which counts the shared buffers it touched) is read
#          before the stream is stopped.  Then VACUUM streaming.outbox_chunks, as
#          autovacuum would within a minute (its size before is shown).
#
# Both streams' workers are sampled every 250 ms for their RSS in parts
# (RssAnon: private memory, malloc's and librdkafka's; RssShmem: the shared
# buffers it touched), whose peaks are printed beside VmHWM, and their CPU
# time is split into the main thread's and librdkafka's threads'.
#
# Checked: each table holds the N orders; each output topic holds N
# distinct (stream, batch id, seq) headers and N distinct order ids, and
# every partition of it still starts at offset 0 (the mock kept everything).
# Printed: records/s of each run, the ratio kafka/table of each round and of
# the medians, the outbox's peak rows, the worker's peak RSS.
#
# Then the latency: a stream copies topic lat_in (4 partitions) into a Kafka
# sink on lat_out; bench/sink_latency.py produces RATE records/s for SECONDS
# seconds and measures produce-to-delivered latency (p50, p90, p99, max),
# with streaming.naptime = NAPTIME (the idle worker's poll interval).  The
# baseline, at the same time over the same topic: a stream into a table,
# each row stamped with clock_timestamp() when its batch writes it.
#
# Options:
#   --records N         orders (default 1000000)
#   --rounds R          table/kafka rounds (default 2)
#   --rate R            latency: records per second (default 2000)
#   --seconds S         latency: for how long (default 30; 0: no latency run)
#   --naptime T         streaming.naptime of the server (default 50ms)
#   --keep              keep the temp dir (data, server log)
#   --source-options J  kafka_options of the orders source (default {})
#   --sink-options J    kafka_options of the Kafka sinks (default
#                       {"compression.type": "lz4"})
#   --outbox-max-rows N streaming.outbox_max_rows of the server (default: its default)
#   --max-offsets N     max_offsets_per_trigger of the orders source (default
#                       none): both streams in batches of N, as the Kafka
#                       sink's are of half the outbox anyway
#   --perf              profile the worker of round 1's Kafka stream (PERF_STREAM:
#                       another, e.g. table_1; PERF_ARGS: perf record's options)
#                       (perf record -g; its report goes to stderr)
# Environment: KS_PRE_SQL, SQL run after CREATE EXTENSION (e.g. the outbox's
# storage as it was, to compare); KS_CONF, postgresql.conf lines of the
# server (e.g. streaming.log_batches = on).
# As root it runs the server as user postgres; kcat and
# python3-confluent-kafka are installed when missing (bench/lib.sh).
set -uo pipefail

RECORDS=1000000
ROUNDS=2
RATE=2000
SECONDS_LAT=30
NAPTIME=50ms
KEEP=
PERF=
SOURCE_OPTIONS='{}'
SINK_OPTIONS='{"compression.type": "lz4"}'
OUTBOX_MAX_ROWS=
MAX_OFFSETS=NULL
while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=$2; shift 2 ;;
		--rounds) ROUNDS=$2; shift 2 ;;
		--rate) RATE=$2; shift 2 ;;
		--seconds) SECONDS_LAT=$2; shift 2 ;;
		--naptime) NAPTIME=$2; shift 2 ;;
		--keep) KEEP=1; shift ;;
		--perf) PERF=1; shift ;;
		--source-options) SOURCE_OPTIONS=$2; shift 2 ;;
		--sink-options) SINK_OPTIONS=$2; shift 2 ;;
		--outbox-max-rows) OUTBOX_MAX_ROWS=$2; shift 2 ;;
		--max-offsets) MAX_OFFSETS=$2; shift 2 ;;
		-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
		*) echo "bench/kafka_sink.sh: unknown argument \"$1\"" >&2; exit 2 ;;
	esac
done

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench/kafka_sink.sh

say "generating $RECORDS orders"
read -r TOTAL _ _ _ < <("$PY" "$BENCH/gen_orders.py" "$RECORDS" "$DATA/orders.jsonl" "$DATA/orders.csv") ||
	die "gen_orders.py failed"
kafka_create_topic orders 32 || die "could not create topic orders"
kafka_produce orders -z lz4 -l "$DATA/orders.jsonl" || die "producing failed"
bench_check_topic orders "$TOTAL" || die "the broker did not keep every record"

bench_server_start "streaming.naptime = '$NAPTIME'
${OUTBOX_MAX_ROWS:+streaming.outbox_max_rows = $OUTBOX_MAX_ROWS}
${KS_CONF:-}"
psql_do -c "CREATE EXTENSION streaming" || die "CREATE EXTENSION failed"
[ -n "${KS_PRE_SQL:-}" ] && { psql_do -c "$KS_PRE_SQL" || die "KS_PRE_SQL failed"; }
psql_do -c "SELECT streaming.create_kafka_source('orders', '$BOOTSTRAP', topics => ARRAY['orders'],
	starting_offsets => 'earliest', kafka_options => '$SOURCE_OPTIONS', max_offsets_per_trigger => $MAX_OFFSETS,
	columns => 'order_id bigint, user_id bigint, amount numeric(10,2), status text, event_time timestamptz')" >/dev/null ||
	die "create_kafka_source failed"
QUERY='SELECT order_id, user_id, amount, status, event_time FROM orders'
OUTBOX_MAX=$(psql_do -c "SHOW streaming.outbox_max_rows")

now() { date +%s.%N; }
# cpu_s PID: the process's CPU seconds so far (user + system)
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat" 2>/dev/null; }

# worker_pid STREAM: its worker's pid, once it has one
worker_pid()
{
	local pid=
	while [ -z "$pid" ]; do
		pid=$(psql_do -c "SELECT worker_pid FROM streaming.streams WHERE name = '$1'")
	done
	echo "$pid"
}

# worker_hwm PID: the worker's VmHWM in kB
worker_hwm() { awk '/^VmHWM/ { print $2 }' "/proc/$1/status" 2>/dev/null; }

# thread_cpu PID: "main librdkafka": CPU seconds of the main thread and of
# the others (librdkafka's), so far
thread_cpu()
{
	awk -v hz="$(getconf CLK_TCK)" -v pid="$1" 'FNR == 1 {
			sub(/^.*\) /, ""); split($0, f, " ")
			t = (f[12] + f[13]) / hz
			if (FILENAME == "/proc/" pid "/task/" pid "/stat") main += t; else other += t
		}
		END { printf "%.2f %.2f", main, other }' /proc/"$1"/task/*/stat 2>/dev/null
}

# run_stream NAME SINK_ARG: create the stream, wait until everything is in
# its sink; prints "seconds peak_outbox_rows hwm_kB"
run_stream()
{
	local name=$1 sink=$2 t0 t1 mock0 lsn0 sampler rss_sampler peak hwm perf_pid= pid rss
	rm -f "$DATA/outbox.$name"
	t0=$(now)
	mock0=$(cpu_s "$MOCK_BROKER_PID")
	lsn0=$(psql_do -c "SELECT pg_current_wal_lsn()")
	psql_do -c "SELECT streaming.create_stream('$name', \$q\$$QUERY\$q\$$sink)" >/dev/null || return 1
	# the chunks' message counts, by the primary key: the views unpack or
	# scan the whole outbox, dead rows of delivered batches too, four times
	# a second, which took CPU from the stream it measured
	(while :; do psql_do -c "SET enable_seqscan = off" -c "SELECT coalesce(sum(nmsgs), 0) FROM streaming.outbox_chunks
		WHERE stream_id = (SELECT id FROM streaming.stream_defs WHERE name = '$name')" \
		>>"$DATA/outbox.$name" 2>/dev/null; sleep 0.25; done) &
	sampler=$!
	pid=$(worker_pid "$name")
	# the worker's private and shared memory, four times a second
	(while :; do awk '/^RssAnon|^RssShmem/ { printf "%s ", $2 } END { print "" }' "/proc/$pid/status" \
		>>"$DATA/rss.$name" 2>/dev/null; sleep 0.25; done) &
	rss_sampler=$!
	if [ -n "$PERF" ] && [ "$name" = "${PERF_STREAM:-kafka_1}" ]; then
		perf record -q ${PERF_ARGS:--g} -o "$DATA/perf.data" -p "$pid" >/dev/null 2>&1 &
		perf_pid=$!
	fi
	psql_do -c "SELECT streaming.process_available('$name', '30 minutes')" >/dev/null ||
		{ kill $sampler $rss_sampler; return 1; }
	t1=$(now)
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid"
		perf report -i "$DATA/perf.data" --no-children --percent-limit 0.7 --stdio -g none 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -n 60 >&2
	fi
	kill $sampler $rss_sampler 2>/dev/null
	wait $sampler $rss_sampler 2>/dev/null
	hwm=$(worker_hwm "$pid")
	rss=$(awk 'NF == 2 { if ($1 > a) a = $1; if ($2 > s) s = $2 } END { printf "%d/%d", a, s }' "$DATA/rss.$name")
	# where the time went: in batches, or between them (waiting for room in
	# the outbox); the worker's CPU, and the mock broker's (one process for
	# the source's fetches and the sink's produce requests alike)
	read -r cpu_main cpu_rdk < <(thread_cpu "$pid")
	psql_do -c "SELECT format('%s: %s batches (%s), %s s in batches of %s s; CPU s: worker %s (main thread %s, librdkafka %s), mock broker %s; WAL %s; peak RssAnon/RssShmem kB %s', stream, count(*),
		string_agg(num_input_rows || ' rows in ' || round(extract(epoch FROM duration)::numeric, 2) || ' s', ', ' ORDER BY batch_id),
		round(extract(epoch FROM sum(duration))::numeric, 2), round(($t1 - $t0)::numeric, 2),
		'$(cpu_s "$pid")', '$cpu_main', '$cpu_rdk',
		round($(cpu_s "$MOCK_BROKER_PID") - $mock0, 2), pg_size_pretty(pg_current_wal_lsn() - '$lsn0'), '$rss')
		FROM streaming.progress WHERE stream = '$name' AND num_input_rows > 0 GROUP BY stream" >&2
	peak=$(sort -n "$DATA/outbox.$name" | tail -n 1)
	psql_do -c "SELECT streaming.stop('$name')" >/dev/null
	echo "$(echo "$t1 - $t0" | bc -l) ${peak:-0} ${hwm:-?} $rss"
}

declare -a T_TABLE T_KAFKA PEAKS HWMS_T HWMS_K RSS_T RSS_K OUTBOX_SIZE
for r in $(seq 1 "$ROUNDS"); do
	say "round $r: table sink"
	read -r t _ h m < <(run_stream "table_$r" "") || die "the table stream failed"
	n=$(psql_do -c "SELECT count(*) FROM table_$r")
	[ "$n" = "$TOTAL" ] || die "table_$r holds $n rows, not $TOTAL"
	T_TABLE[$r]=$t; HWMS_T[$r]=$h; RSS_T[$r]=$m

	say "round $r: Kafka sink"
	kafka_create_topic "out_$r" 32 || die "could not create topic out_$r"
	psql_do -c "SELECT streaming.create_kafka_sink('out_$r', '$BOOTSTRAP', 'out_$r', key_columns => ARRAY['order_id'],
		kafka_options => '$SINK_OPTIONS')" >/dev/null || die "create_kafka_sink failed"
	read -r t p h m < <(run_stream "kafka_$r" ", sink => 'out_$r'") || die "the Kafka stream failed"
	T_KAFKA[$r]=$t; PEAKS[$r]=$p; HWMS_K[$r]=$h; RSS_K[$r]=$m
	# what autovacuum does within a minute: the next round starts with the
	# deleted rows' space free again (else it writes a bloated outbox)
	OUTBOX_SIZE[$r]=$(psql_do -c "SELECT pg_size_pretty(pg_total_relation_size('streaming.outbox_chunks'))")
	psql_do -c "VACUUM streaming.outbox_chunks" || die "VACUUM failed"
	# every message is there once at least, and the mock dropped nothing
	"$PY" - "$BOOTSTRAP" "out_$r" "$TOTAL" <<'PYEOF' || die "out_$r does not hold every order"
import sys
from confluent_kafka import Consumer, TopicPartition
bootstrap, topic, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check", "enable.auto.commit": False,
              "queued.min.messages": 1000000})
parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
ends = {}
for p in parts:
    lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
    if lo != 0:
        sys.exit("%s [%d] starts at %d: the broker dropped messages" % (topic, p, lo))
    ends[p] = hi
c.assign([TopicPartition(topic, p, 0) for p in parts if ends[p] > 0])
headers, keys, n, left = set(), set(), 0, {p for p in parts if ends[p] > 0}
while left:
    for m in c.consume(10000, 1.0):
        if m.error():
            continue
        h = dict(m.headers())
        headers.add((h["streaming-stream"], h["streaming-batch-id"], h["streaming-seq"]))
        keys.add(m.key())
        n += 1
        if m.offset() + 1 >= ends[m.partition()]:
            left.discard(m.partition())
c.close()
print("%s: %d messages, %d distinct (stream, batch id, seq), %d distinct keys" % (topic, n, len(headers), len(keys)),
      file=sys.stderr)
sys.exit(0 if len(headers) == total and len(keys) == total else 1)
PYEOF
done

# ---- latency ---------------------------------------------------------------
if [ "$SECONDS_LAT" != 0 ]; then
	say "latency: $RATE records/s for $SECONDS_LAT s"
	kafka_create_topic lat_in 4 && kafka_create_topic lat_out 4 || die "could not create the latency topics"
	psql_do -c "SELECT streaming.create_kafka_source('lat', '$BOOTSTRAP', topics => ARRAY['lat_in'],
		starting_offsets => 'earliest', columns => 'order_id bigint, sent_ms float8')" >/dev/null &&
	psql_do -c "SELECT streaming.create_kafka_sink('lat_out', '$BOOTSTRAP', 'lat_out', key_columns => ARRAY['order_id'])" >/dev/null &&
	psql_do -c "SELECT streaming.create_stream('lat', 'SELECT order_id, sent_ms FROM lat', sink => 'lat_out')" >/dev/null &&
	psql_do -c "SELECT streaming.create_stream('lat_table', 'SELECT order_id, sent_ms, extract(epoch FROM clock_timestamp()) * 1000 AS written_ms FROM lat')" >/dev/null ||
		die "could not create the latency streams"
	LAT=$("$PY" "$BENCH/sink_latency.py" "$BOOTSTRAP" lat_in lat_out "$RATE" "$SECONDS_LAT") || die "latency: $LAT"
	psql_do -c "SELECT streaming.process_available('lat_table', '5 minutes')" >/dev/null || die "the latency table stream failed"
	LAT_TABLE=$(psql_do -c "SELECT format('%s rows, p50 %s ms, p90 %s ms, p99 %s ms, max %s ms', count(*),
		round(percentile_cont(0.5) WITHIN GROUP (ORDER BY written_ms - sent_ms)),
		round(percentile_cont(0.9) WITHIN GROUP (ORDER BY written_ms - sent_ms)),
		round(percentile_cont(0.99) WITHIN GROUP (ORDER BY written_ms - sent_ms)),
		round(max(written_ms - sent_ms))) FROM lat_table")
	LAT_BATCHES=$(psql_do -c "SELECT string_agg(stream || ': ' || n || ' batches of ' || r || ' rows, ' || d || ' ms each on average', '; ')
		FROM (SELECT stream, count(*) AS n, round(avg(num_input_rows)) AS r, round(avg(extract(epoch FROM duration)) * 1000, 1) AS d
		      FROM streaming.progress WHERE stream IN ('lat', 'lat_table') GROUP BY stream ORDER BY stream) x")
fi

# ---- report ----------------------------------------------------------------
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "Kafka sink vs table sink, $TOTAL orders (32 partitions in and out), streaming.outbox_max_rows = $OUTBOX_MAX"
printf '%-6s %12s %12s %6s %12s %12s %13s %13s %16s %16s\n' round "table rec/s" "kafka rec/s" ratio "outbox peak" \
	"outbox size" "table HWM kB" "kafka HWM kB" "table anon/shm" "kafka anon/shm"
for r in $(seq 1 "$ROUNDS"); do
	printf '%-6s %12.0f %12.0f %6.2f %12s %12s %13s %13s %16s %16s\n' "$r" \
		"$(echo "$TOTAL / ${T_TABLE[$r]}" | bc -l)" "$(echo "$TOTAL / ${T_KAFKA[$r]}" | bc -l)" \
		"$(echo "${T_TABLE[$r]} / ${T_KAFKA[$r]}" | bc -l)" "${PEAKS[$r]}" "${OUTBOX_SIZE[$r]}" \
		"${HWMS_T[$r]}" "${HWMS_K[$r]}" "${RSS_T[$r]}" "${RSS_K[$r]}"
done
MT=$(median "${T_TABLE[@]}")
MK=$(median "${T_KAFKA[@]}")
printf '%-6s %12.0f %12.0f %6.2f\n' median "$(echo "$TOTAL / $MT" | bc -l)" "$(echo "$TOTAL / $MK" | bc -l)" \
	"$(echo "$MT / $MK" | bc -l)"
[ "$SECONDS_LAT" = 0 ] && exit 0
echo
echo "latency at $RATE records/s for $SECONDS_LAT s (streaming.naptime = $NAPTIME), two streams over the same topic at once:"
echo "  Kafka sink, produce to delivered to a consumer: $LAT"
echo "  table sink, produce to written in the batch:    $LAT_TABLE"
echo "  $LAT_BATCHES"
