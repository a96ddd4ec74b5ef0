#!/usr/bin/env bash
# test/demo.sh: what `make demo` runs.
#
# Starts a throwaway PostgreSQL 15 with the extension preloaded (a private
# installation, see test/pg_env.sh; as user postgres when run as root) and
# the embedded mock Kafka broker (or the broker named by
# KAFKA_BOOTSTRAP_SERVERS), produces sample orders to topic "orders", runs a
# stream that keeps the paid ones and a windowed count per 5 minutes, prints
# what they did, and stops everything it started, whatever happens.

set -u
. "$(dirname "${BASH_SOURCE[0]}")/pg_env.sh"

ORDERS=20000

heading()
{
	printf '\n== %s ==\n' "$*"
}

die()
{
	stm_err "$*"
	exit 1
}

# gen_orders N STATSFILE: N orders as JSON lines, one hour of event time,
# with 3 malformed records among them; writes "count sum" of the valid paid
# orders to STATSFILE (the stream's result must match it exactly).
gen_orders()
{
	awk -v n="$1" -v stats="$2" 'BEGIN {
		srand(42)
		for (i = 1; i <= n; i++) {
			r = rand()
			s = r < 0.3 ? "created" : r < 0.7 ? "paid" : r < 0.9 ? "shipped" : "cancelled"
			cents = 500 + int(rand() * 49500)
			t = int((i - 1) * 3600 / n) + int(rand() * 60) - 30
			t = t < 0 ? 0 : t > 3599 ? 3599 : t
			printf "{\"order_id\": %d, \"user_id\": %d, \"amount\": %d.%02d, \"status\": \"%s\", \"event_time\": \"2024-05-01T12:%02d:%02dZ\"}\n", \
				i, 1 + int(rand() * 1000), int(cents / 100), cents % 100, s, int(t / 60), t % 60
			if (s == "paid") { paid++; sum += cents }
			if (i == int(n / 4))
				print "{\"order_id\": 900001, \"user_id\": 7, \"amount\": \"twelve\", \"status\": \"paid\", \"event_time\": \"2024-05-01T12:15:00Z\"}"
			if (i == int(n / 2))
				print "this is not JSON"
			if (i == int(3 * n / 4))
				print "{\"order_id\": 900003, \"user_id\": 9, \"amount\": 12.50, \"status\": \"paid\", \"event_time\": \"2024-05-01T12:99:00Z\"}"
		}
		printf "%d %d.%02d\n", paid, int(sum / 100), sum % 100 > stats
	}'
}

heading "Starting PostgreSQL and Kafka"
stm_setup || die "setup failed"
stm_cluster_start "$STM_TMP/pgdata" "$STM_TMP/sock" || die "could not start PostgreSQL"
echo "PostgreSQL 15 with streaming preloaded, running as $STM_USER, socket in $STM_TMP/sock"
stm_kafka_start || die "could not start the Kafka broker"
echo "Kafka broker at $BOOTSTRAP"

heading "Producing $ORDERS orders and 3 malformed records to topic \"orders\""
kafka_create_topic orders 4 || die "could not create topic orders"
gen_orders "$ORDERS" "$STM_TMP/expected" | kafka_produce orders ||
	die "could not produce to topic orders"
read -r paid_count paid_sum <"$STM_TMP/expected"
echo "4 partitions; $paid_count of the orders are paid, for a total of $paid_sum"

# \g /dev/null: run a statement without printing its (void) result.
"$STM_BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h "$STM_TMP/sock" -p 5432 \
	-U "$STM_USER" -d postgres -v bootstrap="$BOOTSTRAP" \
	-v paid_count="$paid_count" -v paid_sum="$paid_sum" <<'EOF' || die "the demo failed"
\echo
\echo '== Creating a Kafka source and a stream =='
\set ECHO queries
CREATE EXTENSION streaming;

SELECT streaming.create_kafka_source('orders', :'bootstrap',
    topics => ARRAY['orders'], starting_offsets => 'earliest',
    columns => 'order_id bigint, user_id bigint, amount numeric(10,2), status text, event_time timestamptz')
\g /dev/null

SELECT streaming.create_stream('paid_orders',
    $$SELECT order_id, user_id, amount, event_time FROM orders WHERE status = 'paid'$$)
\g /dev/null

SELECT streaming.create_stream('orders_per_5min',
    $$SELECT streaming.window_start() AS window_start, streaming.window_end() AS window_end,
             status, count(*) AS orders, sum(amount) AS total_amount
      FROM orders GROUP BY streaming.tumble(event_time, '5 minutes'), status$$,
    output_mode => 'update')
\g /dev/null

\set ECHO none
\echo
\echo '== Waiting until the stream has processed everything in the topic =='
\set ECHO queries
\timing on
SELECT streaming.process_available('paid_orders')
\g /dev/null
SELECT streaming.process_available('orders_per_5min')
\g /dev/null
\timing off

\set ECHO none
\echo
\echo '== The sink table paid_orders: every paid order, exactly once =='
\set ECHO queries
SELECT count(*) AS paid_orders, sum(amount) AS total_amount,
       count(*) = :paid_count AND sum(amount) = :paid_sum AS matches_input
FROM paid_orders;

SELECT * FROM paid_orders ORDER BY order_id LIMIT 5;

\set ECHO none
\echo '== The windowed stream orders_per_5min: orders per 5 minutes and status =='
\set ECHO queries
SELECT * FROM orders_per_5min ORDER BY window_start, status LIMIT 8;
SELECT sum(orders) AS orders_counted FROM orders_per_5min;

\set ECHO none
\echo '== The streams =='
\set ECHO queries
\x on
SELECT * FROM streaming.streams;
\x off

\set ECHO none
\echo '== Its micro-batches =='
\set ECHO queries
SELECT stream, batch_id, num_input_rows, num_output_rows, num_bad_rows, num_state_rows, duration
FROM streaming.progress ORDER BY stream, batch_id;

\set ECHO none
\echo '== Kafka offsets and lag per partition =='
\set ECHO queries
SELECT stream, topic, partition, committed_offset, high_watermark, lag
FROM streaming.source_lag ORDER BY stream, partition;

\set ECHO none
\echo '== Malformed records, kept in the dead-letter table =='
\set ECHO queries
SELECT stream, position, error FROM streaming.dead_letters ORDER BY stream, id;
EOF

heading "Stopping PostgreSQL and Kafka"
stm_run "$STM_BINDIR/pg_ctl" -D "$STM_TMP/pgdata" -m fast -w stop >/dev/null
stm_cleanup
echo "Done."
