#!/usr/bin/env bash
# bench/memory.sh: peak memory of one batch with many distinct group keys
# (by hand, not in CI; one run at a time: it measures a process's memory).
#
# Produces N JSON records {"id": i % K, "v": i} (K distinct keys) to the
# embedded mock Kafka broker, creates an aggregate stream over them,
#     SELECT id, count(*) AS n, sum(v) AS total FROM src GROUP BY id
# (no window), runs ONE streaming.run_batch in a backend and reports that
# backend's peak RSS (VmHWM of /proc/<pid>/status, which counts the shared
# buffers it touched: shared_buffers is 128MB here; "shm" is how much
# shared memory it had touched at the end, RssShmem), how many times the
# batch merged its groups into the state table part-way (aggstate.c's
# message, DEBUG1 without streaming.log_batches), the batch's duration,
# and what its progress row counted.  The sink is checked: K groups,
# sum(n) = N, sum(total) = the sum of the values.
#
# Options:
#   --records N       records (default 1000000)
#   --keys K          distinct keys (default 100000)
#   --partitions P    partitions of the topic (default 64: the mock keeps
#                     at most 5 MiB per partition)
#   --mode M          output mode: update (default) or complete
#   --dedup           also dedup_keys => ARRAY['v'] (every record a new key)
#   --batch-memory S  streaming.batch_memory of the batch (default 64MB)
#   --contexts        every second during the batch, have the backend log
#                     its memory contexts (pg_log_backend_memory_contexts),
#                     then print the ten largest seen, by name
#
# It uses test/pg_env.sh's private PostgreSQL installation (nothing is
# installed into the system; as root the server runs as user postgres) and
# stops everything it started.

set -u
. "$(dirname "${BASH_SOURCE[0]}")/../test/pg_env.sh"

RECORDS=1000000
KEYS=100000
PARTITIONS=64
MODE=update
DEDUP=
BATCH_MEMORY=
CONTEXTS=

usage()
{
	sed -n '/^# Options:/,/^#$/p' "$0" | sed 's/^# \{0,1\}//'
}

die()
{
	stm_err "$*"
	[ -n "${SAMPLER:-}" ] && kill "$SAMPLER" 2>/dev/null
	exit 1
}

while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--keys) KEYS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--partitions) PARTITIONS=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--mode) MODE=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--dedup) DEDUP=1; shift ;;
		--batch-memory) BATCH_MEMORY=${2:-}; shift 2 || { usage >&2; exit 2; } ;;
		--contexts) CONTEXTS=1; shift ;;
		-h|--help) usage; exit 0 ;;
		*) usage >&2; exit 2 ;;
	esac
done
for v in RECORDS KEYS PARTITIONS; do
	case ${!v} in ''|*[!0-9]*|0) die "--${v,,} wants a positive integer" ;; esac
done
case $MODE in update|complete) ;; *) die "--mode is update or complete" ;; esac
[ "$KEYS" -le "$RECORDS" ] || die "--keys must not exceed --records"

stm_setup || die "setup failed"
stm_kafka_start || die "could not start the Kafka broker"
kafka_create_topic mem "$PARTITIONS" || die "could not create topic mem"
echo "producing $RECORDS records with $KEYS distinct keys to $PARTITIONS partitions" >&2
awk -v n="$RECORDS" -v k="$KEYS" 'BEGIN {
	for (i = 0; i < n; i++)
		printf "{\"id\": %d, \"v\": %d}\n", i % k, i
}' | kafka_produce mem || die "could not produce"

stm_cluster_start "$STM_TMP/pgdata" "$STM_TMP/sock" || die "could not start PostgreSQL"

# psql_q ARGS...: psql on the private server, unaligned, no headers
psql_q()
{
	"$STM_BINDIR/psql" -X -q -At -F ' ' -v ON_ERROR_STOP=1 -h "$STM_TMP/sock" -p 5432 \
		-U "$STM_USER" -d postgres "$@"
}

# sample_contexts: until the batch is done, once a second, make the backend
# that runs it log its memory contexts
sample_contexts()
{
	while [ ! -s "$STM_TMP/result" ]; do
		psql_q -c "SELECT pg_log_backend_memory_contexts(pid) FROM pg_stat_activity
			WHERE query LIKE '%run_batch%' AND pid <> pg_backend_pid()" >/dev/null 2>&1
		sleep 1		# the sampling interval
	done
}

dedup=NULL
[ -n "$DEDUP" ] && dedup="ARRAY['v']"
SAMPLER=
if [ -n "$CONTEXTS" ]; then
	sample_contexts &
	SAMPLER=$!
fi
psql_q -v bootstrap="$BOOTSTRAP" -v mode="$MODE" -v batch_memory="$BATCH_MEMORY" \
	-v records="$RECORDS" -v keys="$KEYS" <<EOF >"$STM_TMP/result" 2>"$STM_TMP/messages" ||
CREATE EXTENSION streaming;
SELECT streaming.create_kafka_source('src', :'bootstrap', topics => ARRAY['mem'],
    starting_offsets => 'earliest', columns => 'id bigint, v bigint')
\g /dev/null
SELECT streaming.create_stream('s', 'SELECT id, count(*) AS n, sum(v) AS total FROM src GROUP BY id',
    output_mode => :'mode', dedup_keys => $dedup, start => false)
\g /dev/null
SELECT set_config('streaming.batch_memory', :'batch_memory', false) WHERE :'batch_memory' <> ''
\g /dev/null
SET client_min_messages = debug1;
SELECT streaming.run_batch('s')
\g /dev/null
RESET client_min_messages;
SELECT current_setting('streaming.batch_memory'),
       substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\s*(\d+)'),
       substring(pg_read_file('/proc/self/status') FROM 'RssShmem:\s*(\d+)'),
       (SELECT extract(epoch FROM duration)::numeric(10, 1) FROM streaming.progress WHERE stream = 's'),
       (SELECT num_input_rows FROM streaming.progress WHERE stream = 's'),
       (SELECT num_output_rows FROM streaming.progress WHERE stream = 's'),
       (SELECT num_state_rows FROM streaming.progress WHERE stream = 's'),
       (SELECT count(*) = :keys AND sum(n) = :records AND sum(total) = (:records::numeric * (:records - 1)) / 2 FROM s);
EOF
	die "the batch failed: $(grep -v DEBUG "$STM_TMP/messages" | tail -n 20)"
if [ -n "$SAMPLER" ]; then
	wait "$SAMPLER"
fi
if [ -n "$CONTEXTS" ]; then
	echo "largest memory contexts during the batch (bytes; contexts of one name added up):"
	awk '/logging memory contexts of PID/ { n++ }
		/level: [0-9]*; / {
			sub(/.*level: [0-9]*; /, ""); name = $0; sub(/: [0-9]+ total in .*/, "", name)
			bytes = $0; sub(/.*: /, "", bytes); sub(/ total in .*/, "", bytes)
			sum[n, name] += bytes; names[name] = 1
		}
		/more child contexts containing/ {
			bytes = $0; sub(/.*containing /, "", bytes); sub(/ total.*/, "", bytes)
			sum[n, "(children not listed)"] += bytes; names["(children not listed)"] = 1
		}
		END {
			for (name in names) {
				m = 0
				for (i = 1; i <= n; i++) if (sum[i, name] > m) m = sum[i, name]
				print m, name
			}
		}' "$STM_TMP/pgdata/server.log" | sort -rn | head -n 10
fi
read -r batch_memory hwm shmem secs input output state ok <"$STM_TMP/result"
merges=$(grep -c 'merging them into .* part-way' "$STM_TMP/messages")
printf '%-9s %-9s %-8s %-6s %-13s %-9s %-9s %-7s %-7s %-9s %-9s %s\n' \
	records keys mode dedup batch_memory "rss (MB)" "shm (MB)" merges secs output state "sink ok"
printf '%-9s %-9s %-8s %-6s %-13s %-9s %-9s %-7s %-7s %-9s %-9s %s\n' \
	"$input" "$KEYS" "$MODE" "${DEDUP:+yes}" "$batch_memory" "$((hwm / 1024))" "$((shmem / 1024))" \
	"$merges" "$secs" "$output" "$state" "$ok"
[ "$input" = "$RECORDS" ] || die "the batch read $input records of $RECORDS (the mock keeps 5 MiB per partition: use more --partitions)"
[ "$ok" = t ] || die "the sink does not hold the expected groups"
