#!/bin/bash
# bench/latency.sh: produce -> committed latency of trigger 'continuous'
# against the default trigger ('0'), in the same run (SPEC 3.4).
#
#   taskset -c 1 bench/latency.sh [--rates 2000,20000] [--seconds 15] [--idle 60]
#       [--kafka-options '{"fetch.wait.max.ms": "1"}'] [--shapes stateless,window]
#       [--triggers floor,0,continuous] [--timing] [--keep]
# (--kafka-options: the sources' kafka_options and the floor's consumer's, to measure the mock's fetch hold;
# --triggers: floor, client, 0, continuous, in any combination)
#
# For each trigger (0, continuous) and shape, one stream on a fresh topic of
# 32 partitions on the mock broker (which keeps 5 MiB per partition: 20,000
# records/s for 15 s need that many), run alone:
#   stateless  SELECT the record's columns FROM the source;
#   window     a 1-minute tumbling window in update mode, grouped by the
#              window and order_id, so that every record's group is written
#              by the batch that read it and its latency is exact;
# bench/latency_producer.py produces each rate for --seconds, every record
# carrying produced_at (the wall clock before it is handed to the client);
# a row's latency is pg_xact_commit_timestamp(xmin) - produced_at
# (track_commit_timestamp on, fsync on), the first 2 s of each rate left out.
# It is split at the start of the batch that wrote the row (its
# streaming.batches row has the same xmin): "to start" (p50, ms) is
# produce -> the broker -> the consumer -> the batch's plan, "in batch" the
# batch's plan -> commit record.
# Trigger "floor" (in --triggers, and first by default) measures no stream:
# bench/floor_latency.c (built here with cc and librdkafka) produces each
# rate as latency_producer.py does to a fresh topic and consumes it as a
# continuous stream's source does (its consumer settings, one queue for all
# partitions, woken by its pipe): produce -> received, what any client of
# this broker gets, and its Fetch requests a second.  Each stream line then
# shows its p50 and p99 minus the floor's of the same rate ("-floor").
# With the mock broker the floor is its fetch hold: a Fetch that finds no
# record is answered, empty, after the full fetch.wait.max.ms (5 ms for the
# continuous trigger), even when records arrive meanwhile (librdkafka
# 2.0.2, rd_kafka_mock_handle_Fetch); a record produced during the hold
# waits for its end and the next Fetch.  --kafka-options go to the floor's
# consumer too (fetch.wait.max.ms 1 there gave a p50 of 0.9 ms for 2.8).
# And a Fetch gets one message set per partition (with linger.ms 0 one
# record, or the few the producer queued meanwhile), found by a walk of
# the partition's sets from the oldest (rd_kafka_mock_msgset_find), and
# its Produce path is as slow: at 20,000/s (unpinned, 2 shared cores) the
# floor's produce -> ack p50 was 0.83-0.95 s and produce -> received
# 1.7-3.4 s, at 290 Fetches a second.
# Trigger "client" (in --triggers) measures no stream either: a plain librdkafka
# consumer with the continuous trigger's fetch settings (and the
# --kafka-options), bench/consumer_latency.py, on a fresh topic: the
# broker's and the client's share, produce -> delivered to the consumer.
# --timing: the server logs at DEBUG1, and the worker's "batch timing" line
# of each batch (worker.c) splits every row's latency further, printed
# below its stream's line as "phases": to wake (produce -> the worker's
# wait for records ends: the broker, the client, the pipe and the latch),
# woke (-> its step begins), xact (-> the batch begins: the transaction and
# the stream's row), plan, query (fetch, parse, the query, the sink's
# writes), record (positions and progress), commit (the commit, with its
# WAL flush), each the p50 over the rows and, after "|", the mean over the
# rows at or above the p99 (what the slow ones spent it on).
# Then idle: the CPU seconds per minute of a continuous stream's worker (all
# its threads) and of the mock broker with no input, against the default
# trigger's, each measured alone for --idle seconds.
#
# The mock broker holds a fetch that finds nothing for the full
# fetch.wait.max.ms even when records arrive meanwhile (a real broker answers
# at the first record, fetch.min.bytes): that hold is the mock's, and the
# default trigger's 100 ms fetch.wait.max.ms shows in its figures.
set -u
RATES=2000,20000
SECS=15
IDLE=60
KEEP=
KOPTS='{}'
SHAPES=stateless,window
TRIGGERS=floor,0,continuous
TIMING=
while [ $# -gt 0 ]; do
	case $1 in
		--rates) RATES=$2; shift ;;
		--seconds) SECS=$2; shift ;;
		--idle) IDLE=$2; shift ;;
		--keep) KEEP=1 ;;
		--timing) TIMING=1 ;;
		--kafka-options) KOPTS=$2; shift ;;
		--shapes) SHAPES=$2; shift ;;
		--triggers) TRIGGERS=$2; shift ;;
		*) echo "usage: $0 [--rates R,R] [--seconds S] [--idle S] [--kafka-options JSON] [--shapes S,S] [--triggers T,T] [--timing] [--keep]" >&2; exit 2 ;;
	esac
	shift
done
. "$(dirname "$0")/lib.sh"
bench_init latency
bench_server_start "track_commit_timestamp = on
streaming.naptime = '1s'
streaming.progress_history = 1000000${TIMING:+
log_min_messages = debug1}"
psql_do -c "CREATE EXTENSION streaming" >/dev/null || die "CREATE EXTENSION failed"
[ -n "$TIMING" ] && { psql_do -c "CREATE TABLE lat_timing (stream text, batch_id bigint, nrows bigint, woke float8, xact float8, plan float8, query float8, record float8, commit float8, after float8, waited int)" >/dev/null || die "could not create lat_timing"; }

cpu_secs()
{
	sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
		awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}

COLS='order_id bigint, amount numeric(10,2), status text, event_time timestamptz, rate integer, produced_at timestamptz'
N=0
declare -A FLOOR50 FLOOR99
FLOOR_BIN=$STM_TMP/floor_latency
case ",$TRIGGERS," in *,floor,*)
	cc -O2 -o "$FLOOR_BIN" "$BENCH/floor_latency.c" -lrdkafka -lpthread || die "could not build bench/floor_latency.c" ;;
esac
# start_stream TRIGGER SHAPE: a fresh topic, source and stream; sets STREAM, SINK, W
start_stream()
{
	local trigger=$1 shape=$2 q opts="" i
	N=$((N + 1))
	STREAM=l$N SINK=l${N}_sink
	kafka_create_topic "lat$N" 32 >/dev/null || die "could not create topic lat$N"
	if [ "$shape" = stateless ]; then
		q="SELECT order_id, amount, status, event_time, rate, produced_at FROM lat$N"
	else
		q="SELECT streaming.window_start() AS ws, order_id, count(*) AS n, sum(amount) AS total, max(rate) AS rate, max(produced_at) AS produced_at FROM lat$N GROUP BY streaming.tumble(event_time, '1 minute'), order_id"
		opts=", output_mode => 'update'"
	fi
	psql_do -v b="$BOOTSTRAP" -v t="lat$N" -v c="$COLS" -v q="$q" -v s="$STREAM" -v k="$SINK" -v tr="$trigger" -v ko="$KOPTS" >/dev/null <<EOF || die "setup of $STREAM failed"
SELECT streaming.create_kafka_source(:'t', :'b', topics => ARRAY[:'t'], starting_offsets => 'earliest', columns => :'c', kafka_options => :'ko'::jsonb);
SELECT streaming.create_stream(:'s', :'q', sink => :'k', trigger => :'tr' $opts);
EOF
	W=$(bench_worker_pid "$STREAM") || die "the worker of $STREAM did not start"
	LOG_AT=$(stat -c %s "$PGDATA/server.log")
	sleep 2
}

# load_timing: the "batch timing" lines of $STREAM's worker since it started into lat_timing
load_timing()
{
	tail -c +$((LOG_AT + 1)) "$PGDATA/server.log" |
		awk -v s="$STREAM" -v w=" [$W] " 'index($0, w) && /batch timing: batch/ {
			for (i = 1; i <= NF; i++) if ($i == "batch" && $(i + 1) ~ /^[0-9]+$/) break
			printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s, $(i + 1), $(i + 3), $(i + 5), $(i + 7), $(i + 9), $(i + 11), $(i + 13), $(i + 15), $(i + 17), $(i + 19) }' |
		psql_do -c "DELETE FROM lat_timing WHERE stream = '$STREAM'" -c "COPY lat_timing FROM STDIN" >/dev/null ||
		die "could not load the batch timings of $STREAM"
}

# print_phases RATE: the phases line of $STREAM's rows at RATE (--timing)
print_phases()
{
	local r=$1 out
	load_timing
	out=$(psql_do -F ' ' <<EOF
WITH a AS (SELECT produced_at, extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms, xmin::text AS x
             FROM $SINK WHERE rate = $r),
     m AS (SELECT * FROM a WHERE produced_at >= (SELECT min(produced_at) FROM a) + interval '2 seconds'),
     b AS (SELECT xmin::text AS x, batch_id, started_at FROM streaming.batches WHERE stream_id = (SELECT id FROM streaming.stream_defs WHERE name = '$STREAM')),
     j AS (SELECT m.ms, extract(epoch FROM b.started_at - m.produced_at) * 1000 - t.xact - greatest(t.woke, 0) AS to_wake,
                  greatest(t.woke, 0) AS woke, t.xact, t.plan, t.query, t.record, t.commit
             FROM m JOIN b USING (x) JOIN lat_timing t ON t.stream = '$STREAM' AND t.batch_id = b.batch_id),
     p AS (SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY ms) AS p99 FROM j)
SELECT string_agg(format('%s %s|%s', name, round(p50::numeric, 2), round(slow::numeric, 2)), ', ' ORDER BY ord)
  FROM (SELECT ord, name,
               percentile_cont(0.5) WITHIN GROUP (ORDER BY v) AS p50,
               avg(v) FILTER (WHERE ms >= (SELECT p99 FROM p)) AS slow
          FROM j, LATERAL (VALUES (1, 'to wake', to_wake), (2, 'woke', woke), (3, 'xact', xact), (4, 'plan', plan),
                                  (5, 'query', query), (6, 'record', record), (7, 'commit', commit)) v(ord, name, v)
         GROUP BY ord, name) q;
EOF
	) || die "reading the phases of $STREAM failed"
	printf '%-10s phases (ms, p50|mean of the rows >= p99): %s\n' "" "$out"
	# rows of a batch that began without a wait (they arrived while the
	# batch before it ran) against those of a batch the worker woke for
	out=$(psql_do -F ' ' <<EOF
WITH a AS (SELECT produced_at, extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms, xmin::text AS x
             FROM $SINK WHERE rate = $r),
     m AS (SELECT * FROM a WHERE produced_at >= (SELECT min(produced_at) FROM a) + interval '2 seconds'),
     b AS (SELECT xmin::text AS x, batch_id FROM streaming.batches WHERE stream_id = (SELECT id FROM streaming.stream_defs WHERE name = '$STREAM')),
     j AS (SELECT m.ms, t.waited = 0 AS follow FROM m JOIN b USING (x) JOIN lat_timing t ON t.stream = '$STREAM' AND t.batch_id = b.batch_id)
SELECT round(100.0 * count(*) FILTER (WHERE follow) / nullif(count(*), 0), 1),
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE follow))::numeric, 2),
       round((percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) FILTER (WHERE NOT follow))::numeric, 2)
  FROM j;
EOF
	) || die "reading the follow-on batches of $STREAM failed"
	read -r fshare f50 o50 <<<"$out"
	printf '%-10s rows of batches begun without a wait (records came during the batch before): %s%%, p50 %s ms; after a wait: p50 %s ms\n' "" "$fshare" "$f50" "$o50"
}

stop_stream()
{
	psql_do -c "SELECT streaming.drop_stream('$STREAM')" >/dev/null || die "drop_stream $STREAM failed"
}

measure_client()
{
	local r first=1 n secs f l opts out cpid meas p50 p99 pmax
	opts=$("$PY" -c 'import json, sys; print(" ".join("--option=%s=%s" % kv for kv in json.loads(sys.argv[1]).items()))' "$KOPTS")
	N=$((N + 1))
	kafka_create_topic "lat$N" 32 >/dev/null || die "could not create topic lat$N"
	for r in ${RATES//,/ }; do
		out=$STM_TMP/client$N.$r
		# shellcheck disable=SC2086
		"$PY" "$BENCH/consumer_latency.py" --bootstrap "$BOOTSTRAP" --topic "lat$N" \
			--count $((r * ${SECS%.*})) $opts >"$out" 2>&1 &
		cpid=$!
		for i in $(seq 200); do grep -q ready "$out" && break; sleep 0.05; done
		read -r n secs f l < <("$PY" "$BENCH/latency_producer.py" --bootstrap "$BOOTSTRAP" --topic "lat$N" \
			--rate "$r" --seconds "$SECS" --first-id "$first") || die "latency_producer.py failed"
		wait "$cpid" || die "consumer_latency.py failed: $(cat "$out")"
		read -r meas p50 p99 pmax < <(grep -v ready "$out")
		printf '%-10s %-10s %7s %8s %8s %8s %8s %8s\n' client consumer "$r" "$n" "$meas" "$p50" "$p99" "$pmax"
		first=$((l + 1))
	done
}

# measure_floor: bench/floor_latency.c at each rate, on fresh topics
measure_floor()
{
	local r out n p50 p99 pmax a50 a99 fps wps idle last
	for r in ${RATES//,/ }; do
		last=$r
		N=$((N + 1))
		kafka_create_topic "lat$N" 32 >/dev/null || die "could not create topic lat$N"
		# shellcheck disable=SC2046
		out=$(FLOOR_IDLE_SECONDS=$( [ "$r" = "${RATES##*,}" ] && echo "$IDLE" ) "$FLOOR_BIN" "$BOOTSTRAP" "lat$N" "$r" "$SECS" $("$PY" -c 'import json, sys; print(" ".join("%s %s" % kv for kv in json.loads(sys.argv[1]).items()))' "$KOPTS")) ||
			die "floor_latency failed: $out"
		read -r n p50 p99 pmax a50 a99 fps wps idle <<<"$out"
		FLOOR50[$r]=$p50 FLOOR99[$r]=$p99
		printf '%-10s %-10s %7s %8s %8s %8s %8s %8s   fetches/s %s, produce->ack p50 %s ms\n' floor consumer "$r" "$n" "$n" "$p50" "$p99" "$pmax" "$fps" "$a50"
	done
	FLOOR_IDLE=$idle
}

# minus_floor RATE P50 P99: "p50-floor/p99-floor" when the floor was measured
minus_floor()
{
	[ -n "${FLOOR50[$1]:-}" ] || { echo -; return; }
	awk -v a="$2" -v b="$3" -v fa="${FLOOR50[$1]}" -v fb="${FLOOR99[$1]}" 'BEGIN { printf "%+.2f/%+.2f", a - fa, b - fb }'
}

measure()
{
	local trigger=$1 shape=$2 r first=1 n secs f l stats c0 c1 dist meas p50 p99 pmax nb bms tos inb
	start_stream "$trigger" "$shape"
	for r in ${RATES//,/ }; do
		c0=$(cpu_secs "$W")
		read -r n secs f l < <("$PY" "$BENCH/latency_producer.py" --bootstrap "$BOOTSTRAP" --topic "lat$N" \
			--rate "$r" --seconds "$SECS" --first-id "$first") || die "latency_producer.py failed"
		psql_do -c "SELECT streaming.process_available('$STREAM', '5 minutes')" >/dev/null ||
			die "$STREAM did not catch up"
		c1=$(cpu_secs "$W")
		stats=$(psql_do -F ' ' <<EOF
WITH a AS (SELECT order_id, produced_at, extract(epoch FROM pg_xact_commit_timestamp(xmin) - produced_at) * 1000 AS ms, xmin::text AS x
             FROM $SINK WHERE rate = $r),
     m AS (SELECT ms, x, produced_at FROM a WHERE produced_at >= (SELECT min(produced_at) FROM a) + interval '2 seconds'),
     b AS (SELECT xmin::text AS x, started_at FROM streaming.batches WHERE stream_id = (SELECT id FROM streaming.stream_defs WHERE name = '$STREAM')),
     s AS (SELECT extract(epoch FROM b.started_at - m.produced_at) * 1000 AS tos, m.ms - extract(epoch FROM b.started_at - m.produced_at) * 1000 AS inb
             FROM m JOIN b USING (x))
SELECT (SELECT count(DISTINCT order_id) FROM a WHERE order_id BETWEEN $f AND $l), count(*),
       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2),
       round(max(ms)::numeric, 1),
       (SELECT count(*) FROM streaming.progress WHERE stream = '$STREAM' AND num_input_rows > 0 AND started_at >= (SELECT min(produced_at) FROM a)),
       (SELECT round(avg(extract(epoch FROM duration) * 1000)::numeric, 2) FROM streaming.progress WHERE stream = '$STREAM' AND num_input_rows > 0 AND started_at >= (SELECT min(produced_at) FROM a)),
       (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY tos)::numeric, 2) FROM s),
       (SELECT round(percentile_cont(0.5) WITHIN GROUP (ORDER BY inb)::numeric, 2) FROM s)
  FROM m;
EOF
		) || die "reading latencies failed"
		read -r dist meas p50 p99 pmax nb bms tos inb <<<"$stats"
		printf '%-10s %-10s %7s %8s %8s %8s %8s %8s %8s %8s %7s %8s %8s %13s\n' "$trigger" "$shape" "$r" "$n" "$dist" "$p50" "$p99" "$pmax" "$nb" "$bms" \
			"$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')" "$tos" "$inb" "$(minus_floor "$r" "$p50" "$p99")"
		[ -n "$TIMING" ] && print_phases "$r"
		first=$((l + 1))
	done
	stop_stream
}

idle_cpu()
{
	local trigger=$1 w0 w1 b0 b1 m0 m1
	start_stream "$trigger" stateless
	w0=$(cpu_secs "$W") b0=$(cpu_secs "$MOCK_BROKER_PID") m0=$(cpu_secs "$W/task/$W")
	sleep "$IDLE"
	w1=$(cpu_secs "$W") b1=$(cpu_secs "$MOCK_BROKER_PID") m1=$(cpu_secs "$W/task/$W")
	printf '%-10s idle %s s: worker %s CPU s/min (its main thread %s), mock broker %s CPU s/min\n' "$trigger" "$IDLE" \
		"$(awk -v a="$w0" -v b="$w1" -v s="$IDLE" 'BEGIN { printf "%.3f", (b - a) * 60 / s }')" \
		"$(awk -v a="$m0" -v b="$m1" -v s="$IDLE" 'BEGIN { printf "%.3f", (b - a) * 60 / s }')" \
		"$(awk -v a="$b0" -v b="$b1" -v s="$IDLE" 'BEGIN { printf "%.3f", (b - a) * 60 / s }')"
	stop_stream
}

echo "bench/latency.sh: produce -> commit (pg_xact_commit_timestamp - produced_at), mock broker, fsync on, nproc $(nproc), affinity $(taskset -pc $$ | sed 's/.*: //')"
echo "kafka_options $KOPTS; load before $LOAD_BEFORE; checkout $(git -C "$BENCH/.." rev-parse --short HEAD)"
printf '%-10s %-10s %7s %8s %8s %8s %8s %8s %8s %8s %7s %8s %8s %13s\n' trigger shape rate/s records distinct "p50 ms" "p99 ms" "max ms" batches "ms/batch" "CPU s" "to start" "in batch" "-floor 50/99"
case ",$TRIGGERS," in *,floor,*) measure_floor ;; esac
case ",$TRIGGERS," in *,client,*) measure_client ;; esac
TRIGGERS=$(echo ",$TRIGGERS," | sed 's/,client,/,/; s/,floor,/,/; s/^,//; s/,$//')
for shape in ${SHAPES//,/ }; do
	for trigger in ${TRIGGERS//,/ }; do
		measure "$trigger" "$shape"
	done
done
[ -n "${FLOOR_IDLE:-}" ] && [ "$FLOOR_IDLE" != -1.000 ] &&
	printf '%-10s idle %s s: bench/floor_latency.c'"'"'s consumer alone (librdkafka'"'"'s threads, nothing to fetch) %s CPU s/min\n' floor "$IDLE" "$FLOOR_IDLE"
for trigger in ${TRIGGERS//,/ }; do
	idle_cpu "$trigger"
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
