#!/bin/bash
# bench/latency.sh: produce -> committed latency of trigger 'continuous'
# against the default trigger ('0'), in the same run (SPEC 3.4).
#
#   taskset -c 1 bench/latency.sh [--rates 2000,20000] [--seconds 15] [--idle 60]
#       [--kafka-options '{"fetch.wait.max.ms": "1"}'] [--shapes stateless,window]
#       [--triggers 0,continuous] [--keep]
# (--kafka-options: the sources' kafka_options, to measure the mock's fetch hold)
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
# Trigger "client" (in --triggers) measures no stream: a plain librdkafka
# consumer with the continuous trigger's fetch settings (and the
# --kafka-options), bench/consumer_latency.py, on a fresh topic: the
# broker's and the client's share, produce -> delivered to the consumer.
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
TRIGGERS=0,continuous
while [ $# -gt 0 ]; do
	case $1 in
		--rates) RATES=$2; shift ;;
		--seconds) SECS=$2; shift ;;
		--idle) IDLE=$2; shift ;;
		--keep) KEEP=1 ;;
		--kafka-options) KOPTS=$2; shift ;;
		--shapes) SHAPES=$2; shift ;;
		--triggers) TRIGGERS=$2; shift ;;
		*) echo "usage: $0 [--rates R,R] [--seconds S] [--idle S] [--kafka-options JSON] [--shapes S,S] [--triggers T,T] [--keep]" >&2; exit 2 ;;
	esac
	shift
done
. "$(dirname "$0")/lib.sh"
bench_init latency
bench_server_start "track_commit_timestamp = on
streaming.naptime = '1s'
streaming.progress_history = 1000000"
psql_do -c "CREATE EXTENSION streaming" >/dev/null || die "CREATE EXTENSION failed"

cpu_secs()
{
	sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null |
		awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($12 + $13) / hz }'
}

COLS='order_id bigint, amount numeric(10,2), status text, event_time timestamptz, rate integer, produced_at timestamptz'
N=0
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
	sleep 2
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
		printf '%-10s %-10s %7s %8s %8s %8s %8s %8s %8s %8s %7s %8s %8s\n' "$trigger" "$shape" "$r" "$n" "$dist" "$p50" "$p99" "$pmax" "$nb" "$bms" \
			"$(awk -v a="$c0" -v b="$c1" 'BEGIN { printf "%.2f", b - a }')" "$tos" "$inb"
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
printf '%-10s %-10s %7s %8s %8s %8s %8s %8s %8s %8s %7s %8s %8s\n' trigger shape rate/s records distinct "p50 ms" "p99 ms" "max ms" batches "ms/batch" "CPU s" "to start" "in batch"
case ",$TRIGGERS," in *,client,*) measure_client ;; esac
TRIGGERS=$(echo ",$TRIGGERS," | sed 's/,client,/,/; s/^,//; s/,$//')
for shape in ${SHAPES//,/ }; do
	for trigger in ${TRIGGERS//,/ }; do
		measure "$trigger" "$shape"
	done
done
for trigger in ${TRIGGERS//,/ }; do
	idle_cpu "$trigger"
done
echo "load after $(cut -d' ' -f1-3 /proc/loadavg)"
