#!/usr/bin/env bash
# bench/joins.sh: stream-stream joins (SPEC 3.6, issue 19) against COPY +
# INSERT ... SELECT ... JOIN, in one run.  By hand, not in CI.
#
# One private server (test/pg_env.sh: a copy of PostgreSQL 15 with this
# checkout installed into it; fsync on, shared_buffers 1GB, max_wal_size
# 4GB) and the embedded mock broker.  bench/gen_joins.py makes N orders and
# N payments (JSON, ~90 bytes each): order i at 2026-11-29 + i * 86 ms
# (about a day for 1M), each payment 0-30 minutes after its order, 5% of the
# orders without one and as many with two; each topic in event-time order.
# They are produced lz4-compressed to the topics orders and payments (P
# partitions each, record i to partition i mod P, so that batches cut by
# max_offsets_per_trigger stay aligned in event time), and every partition
# is checked to start at offset 0 with every record there (the mock keeps
# 5 MiB per partition and silently drops older data).
#
# For each join (inner, left), in this order:
#   baseline  COPY orders_<j>, payments_<j> FROM the CSV files (the same
#             records, typed tables), then INSERT INTO base_<j> SELECT ...
#             FROM orders_<j> o [LEFT] JOIN payments_<j> p ON <the
#             condition>: three statements in one session, timed together;
#   uncapped  stream <j>_uncapped: create_stream(start => true) until
#             every record was read and no no-data batch is due (polled
#             with short queries: a waiting process_available's snapshot
#             would keep VACUUM from the state tables' dead rows; the
#             first batch takes everything, then the no-data batch evicts);
#   capped    the same with max_offsets_per_trigger M on both sources: many
#             batches, the state carried between them.
# The stream query, into a table of the baseline's shape:
#   SELECT o.order_id, o.user_id, o.amount, o.order_time, p.payment_id,
#          p.amount AS paid, p.payment_time
#     FROM o_<run> o [LEFT] JOIN p_<run> p
#       ON p.order_id = o.order_id
#      AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes'
# with watermarks of 1 hour on both sides.  Each run's sources also read a
# topic of their own (end_o_<run>, end_p_<run>), empty while the data is
# timed; then one sentinel order and its payment, a day after the data,
# are produced there and process_available waits again (shown apart as
# "flush"): the watermark passes every row, the no-data batch evicts them
# all and the left join gives its last NULL rows.  The baseline loads the
# sentinels too.
#
# Records/s are 2N / seconds (both topics) for the streams, (2N + 2) /
# seconds for the baseline.  Peak state rows per side are the largest
# progress.state_operators -> numRowsTotal over the run's batches (counted
# after the batch stored its rows, before the next one evicts: the table's
# most).  Worker CPU is the worker's user + system time (all its threads)
# when the data part is done; its share of the wall time shows how much it
# waited (for the broker, the disk, or a CPU: the machine is shared).
# Also then: the worker's peak RSS (VmHWM, shared buffers it touched
# included) and its threads' minor page faults: in this VM each fault of a
# new page costs microseconds of system time, and librdkafka's threads
# fault in every page the held records take (issue 19, item 8).
#
# Checked, for every run: the sink equals the baseline's table (EXCEPT ALL
# both ways, all seven columns, after the flush), holds the expected rows
# (the payments + the sentinel pair; left: + one NULL row per unpaid
# order), every record was read once (sum of num_input_rows), none was late
# or bad, and after the flush each side's state holds the sentinel only.
#
# Options:
#   --records N     orders, and payments (default 1000000)
#   --partitions P  partitions of each topic (default 32)
#   --max-offsets M the capped runs' max_offsets_per_trigger (default 100000)
#   --step-ms MS    event time between orders (default 86: 1M orders span a
#                   day; the state holds about 2.5 hours of each side)
#   --joins LIST    "inner left" (default), or one of them
#   --modes LIST    "uncapped capped" (default), or one of them
#   --perf RUN      profile the worker of RUN (e.g. left_capped) with perf
#                   record -g; its top symbols go into the report
#   --explain       load auto_explain (ANALYZE, nested statements, over
#                   --explain-ms ms): the plans of the join's queries as the
#                   worker ran them, into the report
#   --explain-ms MS (default 200)
#   --parallel-workers N  the streams' parallel_workers (default: NULL,
#                   automatic); worker CPU does not count the helpers'
#   --kafka-options JSON  the sources' kafka_options (default {}), e.g.
#                   '{"queued.max.messages.kbytes": "2048"}'
#   --keep          keep the temp dir (data, server log, perf.data)
# Environment: PERF_RECORD_OPTS, perf record's options for --perf (default
#   "-g -F 999"; "--call-graph dwarf -F 299" sees into librdkafka's threads,
#   "-g -c 1 -e page-faults" shows who touches new memory).
# As root it runs the server as user postgres; it installs kcat and
# python3-confluent-kafka when missing (bench_init), and linux-perf for --perf.
set -uo pipefail

RECORDS=1000000
PARTITIONS=32
MAX_OFFSETS=100000
STEP_MS=86
JOINS="inner left"
MODES="uncapped capped"
PERF_RUN=
EXPLAIN=
EXPLAIN_MS=200
KEEP=
PARALLEL_WORKERS=NULL
KAFKA_OPTIONS='{}'
while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=$2; shift 2 ;;
		--partitions) PARTITIONS=$2; shift 2 ;;
		--max-offsets) MAX_OFFSETS=$2; shift 2 ;;
		--step-ms) STEP_MS=$2; shift 2 ;;
		--joins) JOINS=$2; shift 2 ;;
		--modes) MODES=$2; shift 2 ;;
		--perf) PERF_RUN=$2; shift 2 ;;
		--explain) EXPLAIN=1; shift ;;
		--explain-ms) EXPLAIN_MS=$2; shift 2 ;;
		--parallel-workers) PARALLEL_WORKERS=$2; shift 2 ;;
		--kafka-options) KAFKA_OPTIONS=$2; shift 2 ;;
		--keep) KEEP=1; shift ;;
		-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
		*) echo "bench/joins.sh: unknown argument \"$1\"" >&2; exit 2 ;;
	esac
done
for v in "$RECORDS" "$PARTITIONS" "$MAX_OFFSETS" "$STEP_MS" "$EXPLAIN_MS"; do
	case $v in ''|*[!0-9]*|0) echo "bench/joins.sh: --records, --partitions, --max-offsets, --step-ms and --explain-ms want positive integers" >&2; exit 2 ;; esac
done
for j in $JOINS; do
	case $j in inner|left) ;; *) echo "bench/joins.sh: --joins: inner and/or left, not \"$j\"" >&2; exit 2 ;; esac
done
for m in $MODES; do
	case $m in uncapped|capped) ;; *) echo "bench/joins.sh: --modes: uncapped and/or capped, not \"$m\"" >&2; exit 2 ;; esac
done

. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
bench_init bench/joins.sh ${PERF_RUN:+perf}

# ---- data ------------------------------------------------------------------

say "generating $RECORDS orders and $RECORDS payments"
read -r N_ORDERS N_PAYMENTS N_UNPAID N_TWICE JSON_BYTES < <("$PY" "$BENCH/gen_joins.py" --step-ms "$STEP_MS" "$RECORDS" "$DATA") ||
	die "gen_joins.py failed"
[ -n "${JSON_BYTES:-}" ] || die "gen_joins.py failed"
INPUT=$((N_ORDERS + N_PAYMENTS))

# produce TOPIC FILE: record i of FILE to partition i mod (the topic's
# partitions), lz4, one kcat per partition (4 at a time); then every
# partition must start at 0 and the topic hold every line.
produce()
{
	local topic=$1 file=$2 parts lines
	parts=$("$PY" "$BENCH/topic_offsets.py" "$BOOTSTRAP" "$topic" | wc -l)
	lines=$(wc -l <"$file")
	rm -f "$DATA/part."*
	awk -v p="$parts" -v d="$DATA/part." '{ print > (d ((NR - 1) % p)) }' "$file" || return 1
	seq 0 $((parts - 1)) | xargs -P 4 -I{} sh -c '[ -s "$1" ] || exit 0
		kcat -P -b "$2" -t "$3" -p "$4" -z lz4 -X queue.buffering.max.messages=1000000 -X linger.ms=50 -l "$1"' \
		sh "$DATA/part.{}" "$BOOTSTRAP" "$topic" {} 2>"$DATA/kcat.log" || { cat "$DATA/kcat.log" >&2; return 1; }
	rm -f "$DATA/part."*
	bench_check_topic "$topic" "$lines"
}

RUNS=()
for j in $JOINS; do
	for m in $MODES; do
		RUNS+=("${j}_$m")
	done
done
kafka_create_topic orders "$PARTITIONS" && kafka_create_topic payments "$PARTITIONS" || die "could not create the topics"
for r in "${RUNS[@]}"; do
	kafka_create_topic "end_o_$r" 1 && kafka_create_topic "end_p_$r" 1 || die "could not create the sentinel topics"
done
say "producing (lz4, $PARTITIONS partitions each)"
T0=$(date +%s.%N)
produce orders "$DATA/orders.jsonl" && produce payments "$DATA/payments.jsonl" || die "producing failed"
PRODUCE_SECS=$(awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')

# ---- server ----------------------------------------------------------------

CONF="streaming.naptime = '100ms'
streaming.log_batches = on
log_line_prefix = '%m [%p] %b '"
[ -n "$EXPLAIN" ] && CONF="$CONF
shared_preload_libraries = 'streaming, auto_explain'
auto_explain.log_min_duration = '${EXPLAIN_MS}ms'
auto_explain.log_analyze = on
auto_explain.log_buffers = on
auto_explain.log_nested_statements = on"
bench_server_start "$CONF"

ORDER_COLS='order_id bigint, user_id bigint, amount numeric(10,2), order_time timestamptz'
PAYMENT_COLS='payment_id bigint, order_id bigint, amount numeric(10,2), payment_time timestamptz'
SINK_COLS='order_id bigint, user_id bigint, amount numeric(10,2), order_time timestamptz, payment_id bigint, paid numeric(10,2), payment_time timestamptz'
COND="p.order_id = o.order_id AND p.payment_time BETWEEN o.order_time AND o.order_time + interval '30 minutes'"
OUT="o.order_id, o.user_id, o.amount, o.order_time, p.payment_id, p.amount AS paid, p.payment_time"
WATERMARKS='{"o": {"event_time": "order_time", "delay": "1 hour"}, "p": {"event_time": "payment_time", "delay": "1 hour"}}'
psql_do -c "CREATE EXTENSION streaming" || die "CREATE EXTENSION failed"
for j in $JOINS; do
	psql_do -c "CREATE TABLE orders_$j ($ORDER_COLS)" -c "CREATE TABLE payments_$j ($PAYMENT_COLS)" \
		-c "CREATE TABLE base_$j ($SINK_COLS)" || die "CREATE TABLE failed"
done
for r in "${RUNS[@]}"; do
	cap=NULL
	case $r in *_capped) cap=$MAX_OFFSETS ;; esac
	psql_do -c "CREATE TABLE out_$r ($SINK_COLS)" \
		-c "SELECT streaming.create_kafka_source('o_$r', '$BOOTSTRAP', topics => ARRAY['orders', 'end_o_$r'],
			starting_offsets => 'earliest', columns => '$ORDER_COLS', max_offsets_per_trigger => $cap, kafka_options => '$KAFKA_OPTIONS')" \
		-c "SELECT streaming.create_kafka_source('p_$r', '$BOOTSTRAP', topics => ARRAY['payments', 'end_p_$r'],
			starting_offsets => 'earliest', columns => '$PAYMENT_COLS', max_offsets_per_trigger => $cap, kafka_options => '$KAFKA_OPTIONS')" \
		>/dev/null || die "creating the sources of $r failed"
done

now() { date +%s.%N; }
# cpu_s PID: the process's CPU seconds so far (user + system, all threads)
cpu_s() { awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat" 2>/dev/null; }
load1() { cut -d' ' -f1 /proc/loadavg; }
# runq_s PID: seconds the process's threads waited on a run queue for a CPU
# mem_s PID: the process's peak resident memory and its minor page faults
# (all threads: each costs microseconds of system time in a VM)
mem_s() {
	awk '/^VmHWM/ { printf "%d MB peak RSS, ", $2 / 1024 }' "/proc/$1/status" 2>/dev/null
	cat /proc/"$1"/task/*/stat 2>/dev/null | awk '{ sub(/^.*\) /, ""); f += $8 } END { printf "%d minor faults", f }'
}
runq_s() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ w += $2 } END { printf "%.2f", w / 1e9 }'; }

# ---- baseline --------------------------------------------------------------

# baseline J: COPY both, INSERT ... [LEFT] JOIN; sets B_SECS[J] ("total copy
# insert" seconds), B_CPU[J] (the backend's CPU seconds), B_LOAD[J]
declare -A B_SECS B_CPU B_LOAD B_RUNQ
baseline()
{
	local j=$1 kind=JOIN out
	[ "$j" = left ] && kind="LEFT JOIN"
	say "baseline $j: COPY + INSERT ... $kind"
	B_LOAD[$j]=$(load1)
	out=$(psql_do -F ' ' -v o="$DATA/orders.csv" -v p="$DATA/payments.csv" -v hz="$(getconf CLK_TCK)" <<EOF
CHECKPOINT;
SELECT extract(epoch FROM clock_timestamp()) AS t0 \gset
COPY orders_$j FROM :'o' (FORMAT csv);
COPY payments_$j FROM :'p' (FORMAT csv);
SELECT extract(epoch FROM clock_timestamp()) AS t1 \gset
INSERT INTO base_$j SELECT $OUT FROM orders_$j o $kind payments_$j p ON $COND;
SELECT round((extract(epoch FROM clock_timestamp()) - :t0)::numeric, 2),
       round((:t1 - :t0)::numeric, 2),
       round((extract(epoch FROM clock_timestamp()) - :t1)::numeric, 2),
       (SELECT round((f[12]::bigint + f[13]::bigint) / :hz::numeric, 2)
          FROM string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f),
       round(split_part(pg_read_file('/proc/self/schedstat'), ' ', 2)::numeric / 1e9, 2);
EOF
	) || die "baseline $j failed"
	read -r t c i cpu rq <<<"$out"
	B_SECS[$j]="$t $c $i"
	B_CPU[$j]=$cpu
	B_RUNQ[$j]=$rq
}

# ---- a stream run ----------------------------------------------------------

# stream_run RUN: create and start the stream, wait for the data; then
# the sentinels, and wait again.  Sets R_SECS, R_FLUSH, R_CPU, R_MOCK, R_LOAD
# of RUN.
declare -A R_SECS R_FLUSH R_CPU R_MOCK R_LOAD R_LAST R_RUNQ R_MEM
stream_run()
{
	local r=$1 j=${1%%_*} kind=JOIN t0 t1 t2 pid= mock0 perf_pid= i
	[ "$j" = left ] && kind="LEFT JOIN"
	say "stream $r"
	psql_do -c CHECKPOINT || die "CHECKPOINT failed"
	R_LOAD[$r]=$(load1)
	mock0=$(cpu_s "$MOCK_BROKER_PID")
	t0=$(now)
	psql_do -v q="SELECT $OUT FROM o_$r o $kind p_$r p ON $COND" -v w="$WATERMARKS" -v r="$r" -v pw="$PARALLEL_WORKERS" >/dev/null <<'EOF' ||
SELECT streaming.create_stream(:'r', :'q', sink => 'out_' || :'r', watermarks => :'w', start => true,
                               parallel_workers => :pw);
EOF
		die "create_stream $r failed"
	if [ "$PERF_RUN" = "$r" ]; then
		pid=$(bench_worker_pid "$r") || die "no worker for $r"
		# shellcheck disable=SC2086
		perf record -q ${PERF_RECORD_OPTS:--g -F 999} -p "$pid" -o "$DATA/perf.data" >"$DATA/perf-record.log" 2>&1 &
		perf_pid=$!
	fi
	# the data part's end: polled with short queries, not process_available,
	# whose one statement's snapshot would hold back every VACUUM of the
	# state tables while it waits (as any long transaction does); one psql
	# every 0.2 s: each is a process and a backend, and two every 50 ms
	# competed with the worker for the one core it ran on (taskset -c 1;
	# the baseline had no such poller)
	until st=$(psql_do -c "SELECT CASE WHEN status = 'failed' THEN 'failed'
			WHEN coalesce((SELECT sum(num_input_rows) FROM streaming.progress WHERE stream = '$r'), 0) >= $INPUT
			 AND NOT no_data_batch_due THEN 'done' ELSE 'wait' END FROM streaming.stream_defs WHERE name = '$r'") &&
		[ "$st" = done ]; do
		[ "$st" = failed ] && { tail -n 30 "$PGDATA/server.log" >&2; die "stream $r failed"; }
		sleep 0.2
	done
	t1=$(now)
	pid=$(psql_do -c "SELECT worker_pid FROM streaming.streams WHERE name = '$r'")
	R_CPU[$r]=$(cpu_s "$pid")
	R_RUNQ[$r]=$(runq_s "$pid")
	R_MEM[$r]=$(mem_s "$pid")
	R_LAST[$r]=$(psql_do -c "SELECT last_batch_id FROM streaming.streams WHERE name = '$r'")
	R_MOCK[$r]=$(awk -v a="$mock0" -v b="$(cpu_s "$MOCK_BROKER_PID")" 'BEGIN { printf "%.2f", b - a }')
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid"
	fi
	R_SECS[$r]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
	# the final watermark: the sentinels, then every row is evicted
	kcat -P -b "$BOOTSTRAP" -t "end_o_$r" -p 0 -l "$DATA/end_orders.jsonl" &&
		kcat -P -b "$BOOTSTRAP" -t "end_p_$r" -p 0 -l "$DATA/end_payments.jsonl" || die "producing the sentinels failed"
	psql_do -c "SELECT streaming.process_available('$r', '10 minutes')" >/dev/null || die "stream $r: the flush failed"
	t2=$(now)
	R_FLUSH[$r]=$(awk -v a="$t1" -v b="$t2" 'BEGIN { printf "%.2f", b - a }')
	psql_do -c "SELECT streaming.stop('$r')" >/dev/null || die "stop $r failed"
}

for j in $JOINS; do
	baseline "$j"
	for m in $MODES; do
		stream_run "${j}_$m"
	done
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- checks ----------------------------------------------------------------

# check RUN: one line "ok|FAILED: what" and the figures:
#   batches peak_o peak_o_batch peak_p peak_p_batch final_o final_p
declare -A C_LINE C_FIG C_PROFILE
FAILED=
for r in "${RUNS[@]}"; do
	j=${r%%_*}
	expect=$((N_PAYMENTS + 1))
	expect_null=0
	if [ "$j" = left ]; then expect=$((N_PAYMENTS + N_UNPAID + 1)); expect_null=$N_UNPAID; fi
	# a capped run's state: a batch's rows and what the watermark keeps
	# (1 hour of delay, the 30-minute bound, payments up to 30 minutes
	# behind: 2 hours of event time), for each side
	bound=$((N_ORDERS + 1))
	case $r in *_capped) bound=$((MAX_OFFSETS + (7200000 + STEP_MS - 1) / STEP_MS)) ;; esac
	res=$(psql_do -F ' ' -v r="$r" -v j="$j" -v last="${R_LAST[$r]}" -v bound="$bound" -v input="$((INPUT + 2))" -v expect="$expect" -v expect_null="$expect_null" <<'EOF'
SELECT format('out_%s', :'r') AS out, format('base_%s', :'j') AS base \gset
SELECT id FROM streaming.stream_defs WHERE name = :'r' \gset
-- the sink against the baseline, both ways, and its rows
SELECT (SELECT count(*) FROM (TABLE :"out" EXCEPT ALL TABLE :"base") a) AS only_stream,
       (SELECT count(*) FROM (TABLE :"base" EXCEPT ALL TABLE :"out") b) AS only_base,
       (SELECT count(*) FROM :"out") AS n_out,
       (SELECT count(*) FROM :"out" WHERE payment_id IS NULL) AS n_null,
       (SELECT count(*) FROM :"base" WHERE payment_id IS NULL) AS base_null \gset
SELECT sum(num_input_rows) AS n_in, sum(num_late_rows) AS n_late, sum(num_bad_rows) AS n_bad,
       count(*) FILTER (WHERE num_input_rows > 0 AND batch_id <= :last) AS data_batches,
       count(*) FILTER (WHERE batch_id <= :last) AS batches,
       round(extract(epoch FROM sum(duration) FILTER (WHERE batch_id <= :last))::numeric, 2) AS in_batches,
       max((state_operators -> 'o' ->> 'numRowsTotal')::bigint) AS peak_o,
       max((state_operators -> 'p' ->> 'numRowsTotal')::bigint) AS peak_p
  FROM streaming.progress WHERE stream = :'r' \gset
SELECT min(batch_id) FILTER (WHERE (state_operators -> 'o' ->> 'numRowsTotal')::bigint = :peak_o) AS peak_o_at,
       min(batch_id) FILTER (WHERE (state_operators -> 'p' ->> 'numRowsTotal')::bigint = :peak_p) AS peak_p_at
  FROM streaming.progress WHERE stream = :'r' \gset
SELECT 'join_' || :id || '_left' AS state_o, 'join_' || :id || '_right' AS state_p \gset
SELECT (SELECT count(*) FROM streaming.:"state_o") AS final_o, (SELECT count(*) FROM streaming.:"state_p") AS final_p \gset
SELECT coalesce(last_error, '') = '' AND status IN ('stopped', 'finished') AS healthy,
       coalesce(last_error, '-') AS last_error FROM streaming.stream_defs WHERE name = :'r' \gset
SELECT concat_ws('; ',
         CASE WHEN :only_stream + :only_base > 0 THEN format('%s rows only in the sink, %s only in the baseline', :only_stream, :only_base) END,
         CASE WHEN :n_out <> :expect THEN format('%s rows in the sink, not %s', :n_out, :expect) END,
         CASE WHEN :n_null <> :expect_null OR :base_null <> :expect_null
              THEN format('%s NULL rows in the sink, %s in the baseline, not %s', :n_null, :base_null, :expect_null) END,
         CASE WHEN :n_in <> :input THEN format('%s records read, not %s', :n_in, :input) END,
         CASE WHEN :n_late + :n_bad > 0 THEN format('%s late and %s bad records', :n_late, :n_bad) END,
         CASE WHEN :peak_o > :bound OR :peak_p > :bound THEN format('peak state %s and %s rows, above %s', :peak_o, :peak_p, :bound) END,
         CASE WHEN :final_o <> 1 OR :final_p <> 1 THEN format('after the flush the state holds %s and %s rows, not the sentinels', :final_o, :final_p) END,
         CASE WHEN :'healthy' <> 't' THEN format('the stream: %s', :'last_error') END) AS problems \gset
SELECT CASE WHEN :'problems' = '' THEN 'ok' ELSE 'FAILED: ' || :'problems' END;
SELECT :data_batches, :batches, :peak_o, :peak_o_at, :peak_p, :peak_p_at, :final_o, :final_p, :n_out, :n_null, :in_batches;
-- each side's state rows after each batch of the data part (no-data batches in parentheses)
SELECT string_agg(format(CASE WHEN num_input_rows > 0 THEN '%s/%s' ELSE '(%s/%s)' END,
                         state_operators -> 'o' ->> 'numRowsTotal', state_operators -> 'p' ->> 'numRowsTotal'),
                  ' ' ORDER BY batch_id)
  FROM streaming.progress WHERE stream = :'r' AND batch_id <= :last;
EOF
	) || die "checking $r failed"
	C_LINE[$r]=$(sed -n 1p <<<"$res")
	C_FIG[$r]=$(sed -n 2p <<<"$res")
	C_PROFILE[$r]=$(sed -n 3p <<<"$res")
	case ${C_LINE[$r]} in ok) ;; *) FAILED=1 ;; esac
done

# ---- report ----------------------------------------------------------------

group() { sed -e ':a' -e 's/\([0-9]\)\([0-9]\{3\}\)\($\|[^0-9]\)/\1,\2\3/' -e 'ta' <<<"$1"; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { if (s > 0) printf "%d", n / s; else print "-" }'; }
COMMIT=$(git -c safe.directory="$STM_SRC" -C "$STM_SRC" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -c safe.directory="$STM_SRC" -C "$STM_SRC" status --porcelain --untracked-files=no 2>/dev/null)" ] &&
	COMMIT="$COMMIT + uncommitted changes"
{
	echo
	echo "stream-stream join benchmark: $(group "$N_ORDERS") orders + $(group "$N_PAYMENTS") payments (JSON, $(group "$JSON_BYTES") bytes;"
	echo "  $(group "$N_UNPAID") orders unpaid, $(group "$N_TWICE") paid twice), topics of $PARTITIONS partitions, lz4, produced in ${PRODUCE_SECS}s;"
	echo "  1-hour watermarks on both sides, p.payment_time BETWEEN o.order_time AND o.order_time + 30 minutes;"
	echo "  capped: max_offsets_per_trigger $(group "$MAX_OFFSETS") on both sources"
	echo "commit $COMMIT; nproc $(nproc); PostgreSQL $(psql_do -c 'SHOW server_version'); fsync on, shared_buffers 1GB, streaming.naptime 100ms"
	echo "load average before $LOAD_BEFORE, after $LOAD_AFTER (the machine is shared: compare within one run)"
	echo
	FMT='%-6s %-9s %8s %10s %7s %7s %10s %12s %12s %7s %7s %8s  %s\n'
	# shellcheck disable=SC2059 # one format for the table
	printf "$FMT" join run seconds "records/s" "vs base" batches "in batches" "peak state o" "peak state p" \
		"CPU s" "runq s" "flush s" load1
	for j in $JOINS; do
		read -r bt bc bi <<<"${B_SECS[$j]}"
		brate=$(rate "$((INPUT + 2))" "$bt")
		# shellcheck disable=SC2059
		printf "$FMT" "$j" baseline "$bt" "$(group "$brate")" 1.00 - - - - "${B_CPU[$j]}" "${B_RUNQ[$j]}" - "${B_LOAD[$j]}"
		for m in $MODES; do
			r=${j}_$m
			read -r dbat bat po _ pp _ _ _ _ _ inb <<<"${C_FIG[$r]}"
			srate=$(rate "$INPUT" "${R_SECS[$r]}")
			# shellcheck disable=SC2059
			printf "$FMT" "$j" "$m" "${R_SECS[$r]}" "$(group "$srate")" \
				"$(awk -v a="$srate" -v b="$brate" 'BEGIN { printf "%.2f", a / b }')" "$dbat+$((bat - dbat))" "$inb" \
				"$(group "$po")" "$(group "$pp")" "${R_CPU[$r]}" "${R_RUNQ[$r]}" "${R_FLUSH[$r]}" "${R_LOAD[$r]}"
		done
	done
	echo
	echo "baseline seconds: COPY both + INSERT; stream seconds: create_stream until every record was read, no no-data batch due (data only;"
	echo "flush s: the sentinels' batches and the no-data batch after them, apart); batches of the data part: with data + no-data;"
	echo "peak state: largest numRowsTotal of the side over the run's batches (input: $(group "$N_ORDERS") orders, $(group "$N_PAYMENTS") payments;"
	echo "  checked for capped runs: at most max_offsets_per_trigger + 2 hours of event time = $(group "$((MAX_OFFSETS + (7200000 + STEP_MS - 1) / STEP_MS))") rows);"
	echo "in batches: the batches' own durations (the rest: the worker's start, its naptime);"
	echo "CPU s: the worker's user + system time for the data part (the baseline: its backend's); runq s: how long its"
	echo "threads waited for a CPU (the machine's other work); the mock broker used, per run:"
	for r in "${RUNS[@]}"; do printf '  %s %s s' "$r" "${R_MOCK[$r]}"; done
	echo
	echo "the worker's memory when the data part is done:"
	for r in "${RUNS[@]}"; do
		# the most records a source held for later batches (kafka_fetch's log line)
		held=$(awk -v r="$r" 'match($0, /Kafka source "[op]_[a-z]+_[a-z]+" read/) {
				src = substr($0, RSTART + 14, RLENGTH - 20)
				if (src != "o_" r && src != "p_" r) next
				if (match($0, /; [0-9]+ records \([0-9]+ bytes\) held/)) {
					split(substr($0, RSTART + 2, RLENGTH - 2), f, " ")
					n = f[1]; b = substr(f[3], 2) + 0
					if (n > maxn[src]) { maxn[src] = n; maxb[src] = b }
				}
			}
			END { for (s in maxn) { printf "%s%s %d records (%.1f MB)", sep, s, maxn[s], maxb[s] / 1048576; sep = ", " } }' "$PGDATA/server.log")
		printf '  %s: %s; most held for later batches: %s\n' "$r" "${R_MEM[$r]}" "${held:-none logged}"
	done
	for j in $JOINS; do
		read -r bt bc bi <<<"${B_SECS[$j]}"
		echo "baseline $j: COPY $bc s + INSERT $bi s"
	done
	echo
	echo "state rows after each batch of the data part, orders/payments (no-data batches in parentheses):"
	for r in "${RUNS[@]}"; do
		echo "  $r: ${C_PROFILE[$r]}"
	done
	echo
	for r in "${RUNS[@]}"; do
		read -r _ _ _ _ _ _ fo fp nout nnull _ <<<"${C_FIG[$r]}"
		echo "check $r: ${C_LINE[$r]} ($(group "$nout") rows, $(group "$nnull") with NULL payment; state after the flush $fo/$fp)"
	done
	[ -z "$FAILED" ] &&
		echo "checked: every sink equals its baseline (EXCEPT ALL both ways), every record read once, none late, state flushed to the sentinels"
	if [ -n "$PERF_RUN" ] && [ -s "$DATA/perf.data" ]; then
		echo
		echo "perf record -g -p <worker of $PERF_RUN>, top symbols (self):"
		perf report -i "$DATA/perf.data" --no-children --percent-limit 0.8 --stdio -g none --sort dso,symbol 2>/dev/null |
			grep -v '^#' | grep -v '^$' | sed 's/[[:space:]]*-[[:space:]]*-[[:space:]]*$//' | head -n 40 | sed 's/^/  /'
		echo "named functions with their callees (children, self):"
		perf report -i "$DATA/perf.data" --children --percent-limit 3 --stdio -g none --sort symbol 2>/dev/null |
			grep -v '^#' | grep -v '^$' | grep -v '\] 0x0' | sed 's/[[:space:]]*-[[:space:]]*-[[:space:]]*$//' |
			head -n 40 | sed 's/^/  /'
	fi
	if [ -n "$EXPLAIN" ]; then
		echo
		echo "plans over $EXPLAIN_MS ms (auto_explain, ANALYZE) of the workers:"
		awk '/ LOG:  duration: .* plan:/ { inplan = ($0 ~ / streaming /); if (inplan) print; next }
			/^\t/ { if (inplan) print; next } { inplan = 0 }' "$PGDATA/server.log" | head -n 400 | sed 's/^/  /'
	fi
	echo
	echo "server log (errors, warnings):"
	grep -E 'ERROR|WARNING|FATAL|PANIC' "$PGDATA/server.log" | grep -v 'due to administrator command' | head -20 | sed 's/^/  /'
}
[ -z "$FAILED" ] || exit 1
exit 0
