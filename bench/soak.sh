#!/usr/bin/env bash
# bench/soak.sh: a long run under faults, by hand (not in make test).
#
#   bench/soak.sh [--minutes N] [--seed S] [--rate R]
#
# A private PostgreSQL and the mock Kafka broker (test/pg_env.sh); a
# producer writes R records/s (default 2,000) to topic "soak" (8 partitions)
# for N minutes (default 10) while a schedule drawn from seed S waits 20 to
# 60 s between faults and then does one of:
#   kill9-worker   SIGKILL to a stream's worker (the server restarts)
#   kill9-server   SIGKILL to the postmaster, then a start once its
#                  children are gone
#   sigterm-worker SIGTERM to a stream's worker (the launcher starts another)
#   restart        pg_ctl restart -m immediate
#   brokers        every broker down for 10 to 30 s, then up
# Two streams read the topic: soak_all (stateless: every record with its
# position) and soak_win (update mode: count and sum per 10-second window).
# At the end, after the producer stopped and the streams caught up:
#   - soak_all holds every record of the topic exactly once (its rows are
#     the topic's (partition, offset) pairs, each once, as many as the high
#     watermarks sum to: a producer that retried after a broker outage may
#     have written a line twice, as two records);
#   - soak_win equals a GROUP BY over soak_all;
#   - the workers' RSS, sampled every 5 s: the mean of the first and of the
#     last minute.
# Prints a report and exits non-zero if a check failed.

set -u
. "$(dirname "${BASH_SOURCE[0]}")/../test/pg_env.sh"

minutes=10
seed=1
rate=2000
while [ $# -gt 0 ]; do
	case $1 in
		--minutes) minutes=$2; shift 2 ;;
		--seed) seed=$2; shift 2 ;;
		--rate) rate=$2; shift 2 ;;
		-h|--help) sed -n '2,27p' "$0"; exit 0 ;;
		*) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done

die()
{
	stm_err "$*"
	exit 1
}

stm_setup || die "setup failed"
data=$STM_TMP/pgdata
sock=$STM_TMP/sock
stm_cluster_start "$data" "$sock" || die "could not start PostgreSQL"
cat >>"$data/postgresql.conf" <<EOF
streaming.kafka_timeout = '5s'
streaming.retry_delay = '200ms'
restart_after_crash = on
EOF
stm_run "$STM_BINDIR/pg_ctl" -D "$data" -w reload >/dev/null
stm_kafka_start || die "could not start the Kafka broker"
kafka_create_topic soak 8 || die "could not create topic soak"
log=$STM_TMP/soak.log
: >"$log"

psql_()
{
	"$STM_BINDIR/psql" -XAtq -v ON_ERROR_STOP=1 -h "$sock" -p 5432 -U "$STM_USER" -d postgres "$@"
}

# psql, retried while the server restarts (for up to 2 minutes)
psql_retry()
{
	local i
	for i in $(seq 600); do
		psql_ "$@" 2>/dev/null && return 0
		sleep 0.2	# the server is restarting
	done
	psql_ "$@"
}

server_start()
{
	local i
	for i in $(seq 300); do
		stm_run "$STM_BINDIR/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 start \
			>/dev/null 2>&1 && return 0
		sleep 0.2	# the old server's processes are still going away
	done
	die "the server did not start again"
}

psql_ -c "CREATE EXTENSION streaming" >/dev/null
psql_ -v bs="$BOOTSTRAP" >/dev/null <<'EOF' || die "could not create the streams"
SELECT streaming.create_kafka_source('soak', :'bs', topics => ARRAY['soak'],
    starting_offsets => 'earliest',
    columns => 'id bigint, amount numeric(10,2), event_time timestamptz');
SELECT streaming.create_stream('soak_all',
    'SELECT id, amount, event_time, kafka_partition AS part, kafka_offset AS off FROM soak',
    trigger => '200 milliseconds');
SELECT streaming.create_stream('soak_win',
    $$SELECT streaming.window_start() AS ws, count(*) AS n, sum(amount) AS total
      FROM soak GROUP BY streaming.tumble(event_time, '10 seconds')$$,
    output_mode => 'update', trigger => '200 milliseconds');
EOF

# The producer: every half second the next rate/2 records; a kcat that
# fails (brokers down) sends the same lines again until it succeeds.
producer()
{
	local next=1 per=$((rate / 2)) batch=$STM_TMP/batch k=0 t0 due now
	t0=$(date +%s%N)
	while [ ! -e "$STM_TMP/stop" ]; do
		awk -v from="$next" -v n="$per" -v now="$(date -u +%Y-%m-%dT%H:%M:%S)" 'BEGIN {
			for (i = from; i < from + n; i++)
				printf "{\"id\": %d, \"amount\": %d.%02d, \"event_time\": \"%sZ\"}\n", i, i % 1000, i % 100, now
		}' >"$batch"
		until kafka_produce soak <"$batch" >/dev/null 2>&1; do
			sleep 0.5	# brokers down: try again
		done
		next=$((next + per))
		# the rate: the next half second of the schedule (none after a stall)
		k=$((k + 1))
		due=$((t0 + k * 500000000))
		now=$(date +%s%N)
		if [ "$now" -lt "$due" ]; then
			sleep "$(awk -v ns=$((due - now)) 'BEGIN {printf "%.3f", ns / 1e9}')"
		else
			t0=$now k=0
		fi
	done
}

# Every 5 s: "seconds-since-start stream rss_kB" of each worker.
sampler()
{
	local t0=$SECONDS pid
	while [ ! -e "$STM_TMP/stop" ]; do
		psql_ -F ' ' -c "SELECT name, worker_pid FROM streaming.streams WHERE worker_pid IS NOT NULL" \
			2>/dev/null | while read -r name pid; do
			rss=$(awk '/^VmRSS/ {print $2}' "/proc/$pid/status" 2>/dev/null)
			[ -n "$rss" ] && echo "$((SECONDS - t0)) $name $rss" >>"$STM_TMP/rss"
		done
		sleep 5	# the sampling interval
	done
}

worker_pid()
{
	psql_ -c "SELECT worker_pid FROM streaming.streams WHERE name = '$1'" 2>/dev/null
}

producer &
producer_pid=$!
sampler &
sampler_pid=$!

RANDOM=$seed
faults=()
end=$((SECONDS + minutes * 60))
echo "soak: $minutes minutes, seed $seed, $rate records/s; log in $log"
while :; do
	wait_s=$((20 + RANDOM % 41))
	[ $((SECONDS + wait_s)) -ge "$end" ] && break
	sleep "$wait_s"	# the schedule's pause between faults
	stream=$([ $((RANDOM % 2)) -eq 0 ] && echo soak_all || echo soak_win)
	case $((RANDOM % 5)) in
		0) kind=kill9-worker
		   pid=$(worker_pid "$stream"); [ -n "$pid" ] && kill -KILL "$pid" ;;
		1) kind=kill9-server
		   kill -KILL "$(head -n 1 "$data/postmaster.pid")"; server_start ;;
		2) kind=sigterm-worker
		   pid=$(worker_pid "$stream"); [ -n "$pid" ] && kill -TERM "$pid" ;;
		3) kind=restart
		   stm_run "$STM_BINDIR/pg_ctl" -D "$data" -w -t 60 -m immediate restart \
			   -l "$data/server.log" >/dev/null 2>&1 || server_start ;;
		4) kind=brokers
		   down_s=$((10 + RANDOM % 21))
		   kill -USR1 "$MOCK_BROKER_PID"; sleep "$down_s"	# the outage
		   kill -USR2 "$MOCK_BROKER_PID"
		   kind="brokers-down-${down_s}s" ;;
	esac
	faults+=("$kind")
	echo "$((minutes * 60 - end + SECONDS))s: $kind ($stream)" | tee -a "$log"
done
sleep $((end > SECONDS ? end - SECONDS : 0))	# the rest of the run
touch "$STM_TMP/stop"
wait "$producer_pid" "$sampler_pid"

psql_retry -c "SELECT streaming.process_available('soak_all', '10 minutes')" >/dev/null ||
	die "soak_all did not catch up"
psql_retry -c "SELECT streaming.process_available('soak_win', '10 minutes')" >/dev/null ||
	die "soak_win did not catch up"

high=$(kcat -Q -b "$BOOTSTRAP" $(for p in 0 1 2 3 4 5 6 7; do printf -- '-t soak:%d:-1 ' "$p"; done) |
	awk '/offset/ {s += $NF} END {print s + 0}')
report=$(psql_ <<EOF
SELECT 'records in the topic: $high';
SELECT 'soak_all rows: ' || count(*) || ', distinct positions: ' || count(DISTINCT (part, off))
    || ', exactly once: ' || (count(*) = $high AND count(DISTINCT (part, off)) = $high)
FROM soak_all;
SELECT 'soak_win equals GROUP BY over soak_all: ' || NOT EXISTS (
    (SELECT ws, n, total FROM soak_win
     EXCEPT ALL
     SELECT date_bin('10 seconds', event_time, 'epoch'), count(*), sum(amount) FROM soak_all GROUP BY 1)
    UNION ALL
    (SELECT date_bin('10 seconds', event_time, 'epoch'), count(*), sum(amount) FROM soak_all GROUP BY 1
     EXCEPT ALL
     SELECT ws, n, total FROM soak_win));
SELECT 'last_error: ' || coalesce(string_agg(name || ': ' || last_error, '; '), 'none')
FROM streaming.streams WHERE last_error IS NOT NULL;
EOF
)
echo
echo "faults (${#faults[@]}): ${faults[*]}"
echo "$report"
awk -v last=$((minutes * 60 - 60)) '
	$1 < 60 { f[$2] += $3; nf[$2]++ }
	$1 >= last { l[$2] += $3; nl[$2]++ }
	END { for (s in f) printf "%s worker RSS: first minute %.0f kB, last minute %.0f kB\n", s, f[s] / nf[s], (nl[s] ? l[s] / nl[s] : 0) }
' "$STM_TMP/rss"
grep -q 'exactly once: true' <<<"$report" && grep -q 'GROUP BY over soak_all: true' <<<"$report"
