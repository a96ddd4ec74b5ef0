#!/usr/bin/env bash
# bench/avro_cdc.sh: issue 20's two benchmarks, by hand (not in CI), each
# against its baseline measured in the same run on the same server.
#
#   bench/avro_cdc.sh [--records N] [--changes M] [--keys K] [--partitions P]
#                     [--rounds R] [--perf RUN[,RUN...]] [--cache DIR] [--keep]
#                     [--cdc-avro] [--parallel-workers N] [--source-options J]
#
# --rounds R runs each stream and baseline R times, interleaved (JSON, Avro,
# upsert, COPY, then again), each stream into a sink of its own, and gives a
# row per run; the ratios of a round are against that round's baseline.
# --cdc-avro also produces the changes as Debezium Avro change events (the
# envelope of test/avro/debezium_customers.avsc, encoded by
# test/avro_encode.py, keys as Avro ints) and runs an upsert stream from
# them in each round, against the same baseline.
# --perf RUN,... records the worker of each RUN (json, avro, upsert,
# upsert_avro; every
# round's) with perf record -g and prints its top symbols after the table
# (linux-perf, installed by bench_init when missing).
# --parallel-workers N creates the two orders streams with parallel_workers
# => N (default: NULL, automatic); 0 compares the two parsers on one
# process, without the helpers' fetch and hand-over.
# --source-options J gives every source kafka_options J (default {}), e.g.
# '{"fetch.max.bytes": "1048576"}' to compare the consumer's memory.
# --cache DIR keeps the generated orders and changes (and the Avro
# encoding, while the registry gives its schema the same id) in DIR for the
# next run with the same numbers.
#
# On a private PostgreSQL 15 installation (test/pg_env.sh: a copy of the
# system tree with this checkout installed into it), the embedded mock
# broker and the test schema registry (test/schema_registry.py):
#
#   (1) N orders (bench/gen_orders.py, default 1,000,000) as Avro in the
#       Confluent wire format (test/avro_encode.py) on one topic and the
#       same orders as JSON on another, P partitions each; two Kafka
#       sources (format avro, its columns from the registry; format json
#       with the same columns declared) and a stream on each, run one after
#       the other, each timed from create_stream until process_available
#       returns.  Target: Avro >= 1.5x the JSON stream's records/s.
#   (2) M Debezium change events (JSON, default 1,000,000) of K keys
#       (default 100,000): creates, updates and deletes of a captured table,
#       keyed by id (so a key's changes stay in order in its partition), into
#       a stream in output_mode 'upsert' with key_columns id; against COPY of
#       the same changes (CSV) into a staging table plus INSERT ... SELECT
#       DISTINCT ON (id) ... ON CONFLICT (id) DO UPDATE of each key's last
#       change and a DELETE of the keys whose last change is a delete, in
#       one transaction.  Target: the stream >= 0.8x the baseline.
#
# Both replicas are checked to equal the captured table's final state
# (computed by the generator), and the order sinks to hold N rows with the
# orders' sum.  Prints one table; figures are only comparable within a run.
# Besides the wall-clock time, the table gives the CPU time (user + system,
# all threads) of the process that did the work: a stream's worker, and the
# baseline's backend.  On a shared machine the wall-clock time also counts
# the time others had the CPU, so the CPU ratio is the steadier one.  The
# "+ helpers" columns add the CPU time of the stream's parallel helpers
# (automatic: up to streaming.max_parallel_workers_per_stream), which fetch
# and parse most of its records, so the worker's own time misses most of
# its parsing.
# As root (servers run as user postgres).

set -uo pipefail

BENCH=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=$(cd "$BENCH/.." && pwd)
RECORDS=1000000
CHANGES=1000000
KEYS=100000
PARTITIONS=32
ROUNDS=1
PERF_RUN=
CACHE=
KEEP=
CDC_AVRO=
ORDERS_ARGS=
SOURCE_OPTIONS='{}'

while [ $# -gt 0 ]; do
	case $1 in
		--records) RECORDS=$2; shift 2 ;;
		--changes) CHANGES=$2; shift 2 ;;
		--keys) KEYS=$2; shift 2 ;;
		--partitions) PARTITIONS=$2; shift 2 ;;
		--rounds) ROUNDS=$2; shift 2 ;;
		--perf) PERF_RUN=$2; shift 2 ;;
		--cache) CACHE=$2; shift 2 ;;
		--keep) KEEP=1; shift ;;
		--cdc-avro) CDC_AVRO=1; shift ;;
		--parallel-workers) ORDERS_ARGS=", parallel_workers => $(printf %d "$2")"; shift 2 ;;
		--source-options) SOURCE_OPTIONS=$2; shift 2 ;;
		-h|--help) sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
		*) echo "bench/avro_cdc.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

for k in ${PERF_RUN//,/ }; do
	case $k in json|avro|upsert|upsert_avro) ;; *) echo "bench/avro_cdc.sh: --perf takes json, avro, upsert and upsert_avro" >&2; exit 2 ;; esac
done
. "$BENCH/lib.sh"
bench_init bench/avro_cdc.sh ${PERF_RUN:+perf}
stm_registry_start || die "no schema registry"
bench_server_start "streaming.naptime = '100ms'"
psql_q() { psql_do "$@"; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
rate() { awk -v n="$1" -v s="$2" 'BEGIN { printf "%d", n / s }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
now() { date +%s.%N; }

kafka_create_topic orders_json "$PARTITIONS" && kafka_create_topic orders_avro "$PARTITIONS" &&
	kafka_create_topic customers_cdc "$PARTITIONS" || die "could not create the topics"
[ -z "$CDC_AVRO" ] || kafka_create_topic customers_cdc_avro "$PARTITIONS" || die "could not create the topics"

# ---- data ------------------------------------------------------------------
# from_cache KEY FILE...: the cached FILEs of KEY copied into $DATA (false: not all there)
from_cache()
{
	local key=$1 f
	shift
	[ -n "$CACHE" ] || return 1
	for f in "$@"; do [ -s "$CACHE/$key.$f" ] || return 1; done
	for f in "$@"; do cp "$CACHE/$key.$f" "$DATA/$f" || return 1; done
}
# to_cache KEY FILE...
to_cache()
{
	local key=$1 f
	shift
	[ -n "$CACHE" ] || return 0
	mkdir -p "$CACHE" && for f in "$@"; do cp "$DATA/$f" "$CACHE/$key.$f"; done
}

if from_cache "orders-$RECORDS" orders.jsonl orders.csv orders.sum; then
	say "$RECORDS orders from $CACHE"
else
	say "generating $RECORDS orders"
	python3 "$BENCH/gen_orders.py" "$RECORDS" "$DATA/orders.jsonl" "$DATA/orders.csv" >"$DATA/orders.sum" ||
		die "gen_orders.py failed"
	to_cache "orders-$RECORDS" orders.jsonl orders.csv orders.sum
fi
read -r _ _ _ ORDERS_SUM <"$DATA/orders.sum"
cat >"$DATA/orders.avsc" <<'EOF'
{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "order_id", "type": "long"},
  {"name": "user_id", "type": "long"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
  {"name": "status", "type": "string"},
  {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}
EOF
say "producing the orders as JSON and as Avro"
kcat -P -b "$BOOTSTRAP" -t orders_json -X queue.buffering.max.messages=1000000 -X linger.ms=50 \
	-X sticky.partitioning.linger.ms=0 -l "$DATA/orders.jsonl" || die "producing JSON failed"
# the sentinel line of gen_orders.py is not an order: only the first N lines
AVRO_ID=$("$SRC/test/avro_encode.py" --registry "$SCHEMA_REGISTRY" --subject orders_avro-value \
	--schema "$DATA/orders.avsc" --register-only </dev/null) || die "avro_encode.py could not register the schema"
if from_cache "orders-$RECORDS-avro-$AVRO_ID" orders.avro; then
	say "the Avro orders (schema id $AVRO_ID) from $CACHE"
else
	head -n "$RECORDS" "$DATA/orders.jsonl" |
		"$SRC/test/avro_encode.py" --registry "$SCHEMA_REGISTRY" --subject orders_avro-value \
			--schema "$DATA/orders.avsc" >"$DATA/orders.avro" || die "avro_encode.py failed"
	to_cache "orders-$RECORDS-avro-$AVRO_ID" orders.avro
fi
kcat -P -b "$BOOTSTRAP" -t orders_avro -X queue.buffering.max.messages=1000000 -X linger.ms=50 \
	-X sticky.partitioning.linger.ms=0 -D '<<<end-of-avro-record-5c1e>>>' -l "$DATA/orders.avro" ||
	die "producing Avro failed"
JSON_RECORDS=$(wc -l <"$DATA/orders.jsonl")

if from_cache "cdc-$CHANGES-$KEYS" cdc.jsonl cdc.csv cdc.expected; then
	say "$CHANGES changes from $CACHE"
else
say "generating $CHANGES changes of $KEYS keys"
python3 - "$CHANGES" "$KEYS" "$DATA/cdc.jsonl" "$DATA/cdc.csv" >"$DATA/cdc.expected" <<'EOF' || die "the change generator failed"
import json, random, sys
n, keys = int(sys.argv[1]), int(sys.argv[2])
rnd = random.Random(20)
table = {}          # id => (name, balance in cents)


def row(k, r):
    return None if r is None else {"id": k, "name": r[0], "balance": "%d.%02d" % divmod(r[1], 100)}


with open(sys.argv[3], "w") as ev, open(sys.argv[4], "w") as csv:
    for seq in range(1, n + 1):
        k = rnd.randrange(1, keys + 1)
        before = table.get(k)
        if before is None:
            op, after = "c", ("n%d" % seq, rnd.randrange(0, 10 ** 7))
        elif rnd.random() < 0.1:
            op, after = "d", None
        else:
            op, after = "u", ("n%d" % seq, max(before[1] - rnd.randrange(0, 5000), 0))
        if after is None:
            del table[k]
        else:
            table[k] = after
        ev.write("%d:%s\n" % (k, json.dumps({"before": row(k, before), "after": row(k, after), "op": op,
                                              "ts_ms": 1700000000000 + seq, "source": {"table": "customers"}})))
        r = row(k, after or before)
        csv.write("%d,%s,%d,%s,%s\n" % (seq, op, k, r["name"], r["balance"]))
total = sum(r[1] for r in table.values())
print(len(table), "%d.%02d" % divmod(total, 100))
EOF
to_cache "cdc-$CHANGES-$KEYS" cdc.jsonl cdc.csv cdc.expected
fi
read -r EXPECT_ROWS EXPECT_SUM <"$DATA/cdc.expected"
say "producing the changes, keyed by id"
kcat -P -b "$BOOTSTRAP" -t customers_cdc -K: -z lz4 -X queue.buffering.max.messages=1000000 -X linger.ms=50 \
	-l "$DATA/cdc.jsonl" || die "producing the changes failed"
if [ -n "$CDC_AVRO" ]; then
	CDC_SCHEMA=$SRC/test/avro/debezium_customers.avsc
	CDC_ID=$("$SRC/test/avro_encode.py" --registry "$SCHEMA_REGISTRY" --subject customers_cdc_avro-value \
		--schema "$CDC_SCHEMA" --register-only </dev/null) &&
		CDC_KEY_ID=$("$SRC/test/avro_encode.py" --registry "$SCHEMA_REGISTRY" --subject customers_cdc_avro-key \
			--schema '"int"' --register-only </dev/null) || die "avro_encode.py could not register the schemas"
	if from_cache "cdc-$CHANGES-$KEYS-avro-$CDC_ID-$CDC_KEY_ID" cdc.avro; then
		say "the Avro changes (schema ids $CDC_ID, key $CDC_KEY_ID) from $CACHE"
	else
		say "encoding the changes as Debezium Avro"
		# {"key": id, "value": event} lines (the envelope's source has db and table), in two halves at once
		python3 -c '
import json, sys
for line in sys.stdin:
    k, j = line.split(":", 1)
    ev = json.loads(j)
    ev["source"] = {"db": "shop", "table": "customers"}
    print(json.dumps({"key": int(k), "value": ev}))' <"$DATA/cdc.jsonl" >"$DATA/cdc_avro.jsonl" ||
			die "could not write the Avro changes' input"
		half=$(( (CHANGES + 1) / 2 ))
		pids=()
		for part in 1 2; do
			if [ $part = 1 ]; then head -n "$half" "$DATA/cdc_avro.jsonl"; else tail -n +"$((half + 1))" "$DATA/cdc_avro.jsonl"; fi |
				"$SRC/test/avro_encode.py" --registry "$SCHEMA_REGISTRY" --subject customers_cdc_avro-value \
					--schema "$CDC_SCHEMA" --key-subject customers_cdc_avro-key --key-schema '"int"' \
					>"$DATA/cdc.avro.$part" &
			pids+=($!)
		done
		wait "${pids[0]}" && wait "${pids[1]}" || die "avro_encode.py failed"
		cat "$DATA/cdc.avro.1" "$DATA/cdc.avro.2" >"$DATA/cdc.avro" && rm -f "$DATA/cdc.avro."[12] "$DATA/cdc_avro.jsonl"
		to_cache "cdc-$CHANGES-$KEYS-avro-$CDC_ID-$CDC_KEY_ID" cdc.avro
	fi
	say "producing the Avro changes, keyed by id"
	kcat -P -b "$BOOTSTRAP" -t customers_cdc_avro -K '<<<end-of-avro-key-5c1e>>>' -D '<<<end-of-avro-record-5c1e>>>' \
		-z lz4 -X queue.buffering.max.messages=1000000 -X linger.ms=50 -l "$DATA/cdc.avro" ||
		die "producing the Avro changes failed"
fi
chmod -R a+r "$DATA"

psql_q -v bs="$BOOTSTRAP" -v reg="{\"url\": \"$SCHEMA_REGISTRY\"}" -v ko="$SOURCE_OPTIONS" >/dev/null <<'EOF' || die "setup failed"
CREATE EXTENSION streaming;
SELECT streaming.create_kafka_source('orders_avro', :'bs', topics => ARRAY['orders_avro'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg', kafka_options => :'ko');
SELECT streaming.create_kafka_source('orders_json', :'bs', topics => ARRAY['orders_json'],
    starting_offsets => 'earliest', kafka_options => :'ko',
    columns => 'order_id bigint, user_id bigint, amount numeric(10,2), status text, event_time timestamptz');
SELECT streaming.create_kafka_source('customers_cdc', :'bs', topics => ARRAY['customers_cdc'],
    starting_offsets => 'earliest', envelope => 'debezium', kafka_options => :'ko',
    columns => 'id int, name text, balance numeric(12,2)');
EOF
[ -z "$CDC_AVRO" ] || psql_q -v bs="$BOOTSTRAP" -v reg="{\"url\": \"$SCHEMA_REGISTRY\"}" -v ko="$SOURCE_OPTIONS" >/dev/null <<'EOF' || die "setup failed"
SELECT streaming.create_kafka_source('customers_cdc_avro', :'bs', topics => ARRAY['customers_cdc_avro'],
    starting_offsets => 'earliest', envelope => 'debezium', format => 'avro', schema_registry => :'reg',
    kafka_options => :'ko', columns => 'id int, name text, balance numeric(12,2)');
EOF

for ((r = 1; r <= ROUNDS; r++)); do
	psql_q -c "CREATE TABLE cdc_staging_$r (seq bigint, op text, id int, name text, balance numeric(12,2))" \
		-c "CREATE TABLE replica_copy_$r (id int PRIMARY KEY, name text, balance numeric(12,2))" >/dev/null ||
		die "setup failed"
done

# cpu_secs PID: the CPU time (user + system, all threads) of process PID so far
cpu_secs()
{
	awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat"
}

# helpers_cpu_secs STREAM: the CPU time (user + system, all threads) of
# STREAM's parallel helpers so far (they live as long as its worker)
helpers_cpu_secs()
{
	local p
	for p in $(psql_q -c "SELECT a.pid FROM pg_stat_activity a JOIN streaming.stream_defs s
			ON a.application_name LIKE 'streaming helper % of stream ' || s.id WHERE s.name = '$1'"); do
		cpu_secs "$p"
		echo
	done | awk '{ t += $1 } END { printf "%.2f", t }'
}

# run_stream KIND NAME QUERY [create_stream args]: seconds from create_stream
# to the end of process_available, the CPU seconds of the stream's worker
# and of the worker and its parallel helpers (read before it is stopped);
# with --perf KIND, the worker is recorded (perf.data.NAME)
run_stream()
{
	local kind=$1 name=$2 query=$3 t0 t1 pid perf_pid= wcpu
	shift 3
	psql_q -c CHECKPOINT >/dev/null || return 1
	t0=$(now)
	psql_q -c "SELECT streaming.create_stream('$name', \$q\$$query\$q\$ $*)" >/dev/null || return 1
	if [[ ",$PERF_RUN," == *",$kind,"* ]]; then
		pid=$(bench_worker_pid "$name") || return 1
		perf record -q -g -F 999 -p "$pid" -o "$DATA/perf.data.$name" >"$DATA/perf-record.log" 2>&1 &
		perf_pid=$!
	fi
	psql_q -c "SELECT streaming.process_available('$name', '30 minutes')" >/dev/null || return 1
	t1=$(now)
	pid=$(psql_q -c "SELECT worker_pid FROM streaming.streams WHERE name = '$name'")
	wcpu=$([ -n "$pid" ] && cpu_secs "$pid" || echo n/a)
	echo "$(secs "$t0" "$t1") $wcpu $(awk -v w="$wcpu" -v h="$(helpers_cpu_secs "$name")" 'BEGIN { printf "%.2f", w + h }')"
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid"
	fi
	psql_q -c "SELECT streaming.stop('$name')" >/dev/null
}

# run_copy ROUND: the baseline, into cdc_staging_ROUND and replica_copy_ROUND:
# its seconds and its backend's CPU seconds (twice: it has no helpers)
run_copy()
{
	local r=$1 t0
	psql_q -c CHECKPOINT >/dev/null || return 1
	t0=$(now)
	psql_q >/dev/null <<EOF || return 1
SELECT pg_backend_pid() AS backend \\gset
\\setenv BENCH_BACKEND :backend
BEGIN;
COPY cdc_staging_$r FROM '$DATA/cdc.csv' (FORMAT csv);
INSERT INTO replica_copy_$r
SELECT id, name, balance FROM (
    SELECT DISTINCT ON (id) id, op, name, balance FROM cdc_staging_$r ORDER BY id, seq DESC) last
WHERE op <> 'd'
ON CONFLICT (id) DO UPDATE SET name = excluded.name, balance = excluded.balance;
DELETE FROM replica_copy_$r r USING (
    SELECT DISTINCT ON (id) id, op FROM cdc_staging_$r ORDER BY id, seq DESC) last
WHERE last.id = r.id AND last.op = 'd';
COMMIT;
\\! awk -v hz="\$(getconf CLK_TCK)" '{ sub(/^.*\\) /, ""); printf "%.2f\\n", (\$12 + \$13) / hz }' /proc/\$BENCH_BACKEND/stat >$DATA/copy.cpu
EOF
	echo "$(secs "$t0" "$(now)") $(cat "$DATA/copy.cpu") $(cat "$DATA/copy.cpu")"
}

check()
{
	local what=$1 got=$2 want=$3
	[ "$got" = "$want" ] || die "$what: got $got, expected $want"
}

LOAD_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
ROWS=()
row() { ROWS+=("| $1 | $2 | $3 | $4 | $5 | $6 | $7 | $8 | $9 |"); }
for ((r = 1; r <= ROUNDS; r++)); do
	say "round $r: the JSON stream"
	read -r JSON_SECS JSON_CPU JSON_SCPU < <(run_stream json orders_from_json_$r 'SELECT order_id, user_id, amount, status, event_time FROM orders_json' "$ORDERS_ARGS") &&
		[ -n "$JSON_CPU" ] || die "the JSON stream failed"
	say "round $r: the Avro stream"
	read -r AVRO_SECS AVRO_CPU AVRO_SCPU < <(run_stream avro orders_from_avro_$r 'SELECT order_id, user_id, amount, status, event_time FROM orders_avro' "$ORDERS_ARGS") &&
		[ -n "$AVRO_CPU" ] || die "the Avro stream failed"
	say "round $r: the upsert stream"
	read -r UPSERT_SECS UPSERT_CPU UPSERT_SCPU < <(run_stream upsert customers_replica_$r 'SELECT id, name, balance FROM customers_cdc' \
		", output_mode => 'upsert', key_columns => ARRAY['id']") && [ -n "$UPSERT_CPU" ] ||
		die "the upsert stream failed"
	if [ -n "$CDC_AVRO" ]; then
		say "round $r: the Avro upsert stream"
		read -r UPSERT_AVRO_SECS UPSERT_AVRO_CPU UPSERT_AVRO_SCPU < <(run_stream upsert_avro customers_replica_avro_$r \
			'SELECT id, name, balance FROM customers_cdc_avro' ", output_mode => 'upsert', key_columns => ARRAY['id']") &&
			[ -n "$UPSERT_AVRO_CPU" ] || die "the Avro upsert stream failed"
	fi
	say "round $r: COPY + INSERT ... ON CONFLICT"
	read -r COPY_SECS COPY_CPU COPY_SCPU < <(run_copy "$r") && [ -n "$COPY_CPU" ] || die "the baseline failed"

	# ---- checks ------------------------------------------------------------
	check "orders from JSON" "$(psql_q -c "SELECT count(*) || ' ' || sum(amount) FROM orders_from_json_$r")" \
		"$((JSON_RECORDS)) $ORDERS_SUM"
	check "orders from Avro" "$(psql_q -c "SELECT count(*) || ' ' || sum(amount) FROM orders_from_avro_$r WHERE order_id <= $RECORDS")" \
		"$RECORDS $ORDERS_SUM"
	check "the upsert replica" "$(psql_q -c "SELECT count(*) || ' ' || sum(balance) FROM customers_replica_$r")" \
		"$EXPECT_ROWS $EXPECT_SUM"
	check "the COPY replica" "$(psql_q -c "SELECT count(*) || ' ' || sum(balance) FROM replica_copy_$r")" \
		"$EXPECT_ROWS $EXPECT_SUM"
	check "the replicas" "$(psql_q -c "SELECT count(*) FROM (SELECT id, name, balance FROM customers_replica_$r EXCEPT TABLE replica_copy_$r) d")" 0
	if [ -n "$CDC_AVRO" ]; then
		check "the Avro upsert replica" "$(psql_q -c "SELECT count(*) || ' ' || sum(balance) FROM customers_replica_avro_$r")" \
			"$EXPECT_ROWS $EXPECT_SUM"
		check "the Avro replica" "$(psql_q -c "SELECT count(*) FROM (SELECT id, name, balance FROM customers_replica_avro_$r EXCEPT TABLE replica_copy_$r) d")" 0
	fi

	JSON_RATE=$(rate "$JSON_RECORDS" "$JSON_SECS")
	AVRO_RATE=$(rate "$RECORDS" "$AVRO_SECS")
	UPSERT_RATE=$(rate "$CHANGES" "$UPSERT_SECS")
	COPY_RATE=$(rate "$CHANGES" "$COPY_SECS")
	row "$r: JSON orders stream (baseline)" "$JSON_SECS" "$JSON_RATE" 1.00 "" "$JSON_CPU" 1.00 \
		"$JSON_SCPU" 1.00
	row "$r: Avro orders stream" "$AVRO_SECS" "$AVRO_RATE" "$(ratio "$AVRO_RATE" "$JSON_RATE")" ">= 1.5" \
		"$AVRO_CPU" "$(ratio "$JSON_CPU" "$AVRO_CPU")" "$AVRO_SCPU" "$(ratio "$JSON_SCPU" "$AVRO_SCPU")"
	row "$r: COPY + INSERT ... ON CONFLICT of the changes (baseline)" "$COPY_SECS" "$COPY_RATE" 1.00 "" \
		"$COPY_CPU" 1.00 "$COPY_SCPU" 1.00
	row "$r: Debezium upsert stream" "$UPSERT_SECS" "$UPSERT_RATE" "$(ratio "$UPSERT_RATE" "$COPY_RATE")" ">= 0.8" \
		"$UPSERT_CPU" "$(ratio "$COPY_CPU" "$UPSERT_CPU")" "$UPSERT_SCPU" "$(ratio "$COPY_SCPU" "$UPSERT_SCPU")"
	[ -z "$CDC_AVRO" ] || row "$r: Debezium Avro upsert stream" "$UPSERT_AVRO_SECS" "$(rate "$CHANGES" "$UPSERT_AVRO_SECS")" \
		"$(ratio "$(rate "$CHANGES" "$UPSERT_AVRO_SECS")" "$COPY_RATE")" ">= 0.8" "$UPSERT_AVRO_CPU" \
		"$(ratio "$COPY_CPU" "$UPSERT_AVRO_CPU")" "$UPSERT_AVRO_SCPU" "$(ratio "$COPY_SCPU" "$UPSERT_AVRO_SCPU")"
done
LOAD_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

cat <<EOF

issue 20 benchmarks: $RECORDS orders, $CHANGES changes of $KEYS keys, $PARTITIONS partitions, $ROUNDS round(s)${ORDERS_ARGS:+, orders streams with$ORDERS_ARGS}
load average before: $LOAD_BEFORE, after: $LOAD_AFTER ($(nproc) CPUs)

| round: what | seconds | records/s | ratio | target | CPU seconds | CPU ratio | + helpers CPU s | ratio |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
EOF
printf '%s\n' "${ROWS[@]}"
cat <<EOF

checked: both order sinks hold the orders (count, sum of amount); both replicas equal the
captured table's final state ($EXPECT_ROWS rows, sum of balance $EXPECT_SUM) and each other
EOF
if [ -n "$PERF_RUN" ]; then
	for f in "$DATA"/perf.data.*; do
		[ -s "$f" ] || continue
		echo
		echo "perf record -g of the worker of ${f##*/perf.data.}, by thread (librdkafka's are rdk:*):"
		perf report -i "$f" --no-children --stdio -g none --sort comm 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -n 8 | sed 's/^/  /'
		echo "top symbols (self):"
		perf report -i "$f" --no-children --percent-limit 0.7 --stdio -g none --sort dso,symbol 2>/dev/null |
			grep -v '^#' | grep -v '^$' | head -n 45 | sed 's/^/  /'
		echo "with their callees (children):"
		perf report -i "$f" --children --percent-limit 2.5 --stdio -g none --sort symbol 2>/dev/null |
			grep -v '^#' | grep -v '^$' | grep -v '\] 0x0' | head -n 45 | sed 's/^/  /'
	done
fi
