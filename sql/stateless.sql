--
-- stateless: SELECT <expressions> FROM <source> [WHERE ...] streams run
-- with run_batch (SPEC 3 shape 1, 4, 5, 6).
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix, taken
-- out of the output); topics get 4 partitions when first produced to, and
-- every record goes to an explicit partition.
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET st.run = :'run';
CREATE OR REPLACE FUNCTION st_strip(t text) RETURNS text
    LANGUAGE sql STABLE RETURN replace(t, current_setting('st.run'), '');
CREATE VIEW st_progress AS
SELECT stream, batch_id, num_input_rows, num_output_rows, num_bad_rows, num_late_rows,
       max_event_time, watermark,
       st_strip(start_positions::text) AS start_positions,
       st_strip(end_positions::text) AS end_positions
FROM streaming.progress;
CREATE VIEW st_lag AS
SELECT stream, st_strip(topic) AS topic, partition, committed_offset, high_watermark, lag
FROM streaming.source_lag;

\set t st_orders:run
\! printf '%s\n' '{"id": 1, "customer": "alice", "amount": 10.5, "status": "new", "ts": "2024-01-01 10:00:00+00"}' '{"id": 2, "customer": "bob", "amount": 99.99, "status": "paid", "ts": "2024-01-01 10:01:00+00"}' '{"id": 3, "customer": "carol", "amount": 0, "status": "new", "ts": "2024-01-01 10:02:00+00"}' '{"id": 4, "customer": "dave", "amount": 250, "status": "cancelled", "ts": "2024-01-01 10:03:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_orders$KAFKA_RUN_ID" -p 0
\! printf '%s\n' '{"id": 5, "customer": "erin", "amount": 5, "status": "paid", "ts": "2024-01-01 10:04:00+00"}' '{"id": 6, "customer": "alice", "amount": 42, "status": "new", "ts": "2024-01-01 10:05:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_orders$KAFKA_RUN_ID" -p 1
SELECT streaming.create_kafka_source('st_orders', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest',
    columns => 'id bigint, customer text, amount numeric(10,2), status text, ts timestamptz');

--
-- projection, expressions, WHERE over source and metadata columns; the
-- sink is created with the query's column names and types
--
SELECT streaming.create_stream('st_proj',
    $$SELECT id, customer::varchar(10) AS customer, upper(customer) AS shout,
             amount, amount * 2 AS double_amount, amount > 50 AS big,
             ts AT TIME ZONE 'UTC' AS ts_utc, ts + interval '1 hour' AS due,
             kafka_partition AS part, kafka_offset AS off,
             format('%s/%s', kafka_partition, kafka_offset) AS pos,
             coalesce(kafka_key, '\x00'::bytea) AS key, 42 AS answer, 'const' AS label
      FROM st_orders
      WHERE status <> 'cancelled' AND (kafka_partition = 0 OR amount > 40)$$,
    start => false);
\d st_proj
SELECT name, source, sink, output_mode, trigger, status, worker_pid, last_batch_id,
       watermark, last_error, source_error, lag
FROM streaming.streams WHERE name = 'st_proj';

-- batch ids count from 0; NULL when there is nothing new
SELECT streaming.run_batch('st_proj');
SELECT * FROM st_proj ORDER BY id;
SELECT streaming.run_batch('st_proj');
-- each batch takes exactly the new records
\! printf '%s\n' '{"id": 7, "customer": "frank", "amount": 70, "status": "paid", "ts": "2024-01-01 10:06:00+00"}' '{"id": 8, "customer": "grace", "amount": 80, "status": "cancelled", "ts": "2024-01-01 10:07:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_orders$KAFKA_RUN_ID" -p 1
SELECT streaming.run_batch('st_proj');
SELECT id, part, off FROM st_proj ORDER BY id;
\! printf '%s\n' '{"id": 9, "customer": "heidi", "amount": 1, "status": "new", "ts": "2024-01-01 10:08:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_orders$KAFKA_RUN_ID" -p 3
SELECT streaming.run_batch('st_proj');
SELECT streaming.run_batch('st_proj');
SELECT id, part, off FROM st_proj ORDER BY id;
-- progress: one row per batch, positions as Spark's offsets JSON
SELECT * FROM st_progress WHERE stream = 'st_proj' ORDER BY batch_id;
SELECT * FROM st_lag WHERE stream = 'st_proj' ORDER BY topic, partition;
SELECT name, status, last_batch_id, watermark, lag FROM streaming.streams WHERE name = 'st_proj';

--
-- run_batch runs in the caller's transaction: a rollback undoes the batch
--
\! printf '%s\n' '{"id": 10, "customer": "ivan", "amount": 2, "status": "new", "ts": "2024-01-01 10:09:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_orders$KAFKA_RUN_ID" -p 0
BEGIN;
SELECT streaming.run_batch('st_proj');
SELECT count(*) FROM st_proj;
ROLLBACK;
SELECT count(*) FROM st_proj;
SELECT max(batch_id) FROM streaming.progress WHERE stream = 'st_proj';
SELECT streaming.run_batch('st_proj');
SELECT id, part, off FROM st_proj WHERE id = 10;

--
-- reset() forgets positions and progress: the next batch is 0 again and
-- reads from starting_offsets (the sink is left alone)
--
SELECT streaming.reset('st_proj');
SELECT name, status, last_batch_id, lag FROM streaming.streams WHERE name = 'st_proj';
SELECT count(*) FROM streaming.progress WHERE stream = 'st_proj';
SELECT count(*) FROM streaming.source_lag WHERE stream = 'st_proj';
SELECT streaming.run_batch('st_proj');
SELECT * FROM st_progress WHERE stream = 'st_proj' ORDER BY batch_id;
SELECT id, count(*) FROM st_proj GROUP BY id ORDER BY id;

--
-- an existing sink: columns in another order, extra columns with defaults
-- (or NULL), values converted to the sink's column types
--
CREATE TABLE st_audit (
    seq bigserial,
    note text DEFAULT 'from stream',
    amount numeric(12,3),
    extra int,
    id bigint,
    loaded boolean DEFAULT true
);
SELECT streaming.create_stream('st_audit_st', 'SELECT amount, id FROM st_orders WHERE id <= 3',
    sink => 'st_audit', start => false);
SELECT name, sink FROM streaming.streams WHERE name = 'st_audit_st';
SELECT streaming.run_batch('st_audit_st');
SELECT * FROM st_audit ORDER BY seq;
\d st_audit

--
-- drop_stream(drop_sink => true) drops the sink; with false (default) it
-- stays
--
SELECT streaming.drop_stream('st_audit_st');
SELECT to_regclass('st_audit') AS sink;
SELECT streaming.drop_stream('st_proj', drop_sink => true);
SELECT to_regclass('st_proj') AS sink;
SELECT count(*) FROM streaming.streams WHERE name IN ('st_proj', 'st_audit_st');
SELECT count(*) FROM streaming.positions;
SELECT count(*) FROM streaming.batches;
DROP TABLE st_audit;

--
-- a batch that fails (a CHECK constraint of the sink) commits nothing:
-- the sink, the positions and the progress stay as they were
--
\set t st_chk:run
\! printf '%s\n' '{"id": 1, "amount": 10}' '{"id": 2, "amount": 20}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_chk$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('st_chk_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'id int, amount numeric');
CREATE TABLE st_checked (id int, amount numeric CHECK (amount < 100));
SELECT streaming.create_stream('st_chk', 'SELECT id, amount FROM st_chk_src',
    sink => 'st_checked', start => false);
SELECT streaming.run_batch('st_chk');
\! printf '%s\n' '{"id": 3, "amount": 30}' '{"id": 4, "amount": 400}' '{"id": 5, "amount": 50}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_chk$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('st_chk');
SELECT * FROM st_checked ORDER BY id;
SELECT * FROM st_lag WHERE stream = 'st_chk' ORDER BY topic, partition;
SELECT stream, batch_id, num_input_rows, num_output_rows FROM st_progress WHERE stream = 'st_chk' ORDER BY batch_id;
SELECT name, status, last_batch_id FROM streaming.streams WHERE name = 'st_chk';
SELECT count(*) FROM streaming.dead_letters;
-- once the sink accepts the rows, the same records are processed
ALTER TABLE st_checked DROP CONSTRAINT st_checked_amount_check;
SELECT streaming.run_batch('st_chk');
SELECT * FROM st_checked ORDER BY id;
SELECT stream, batch_id, num_input_rows, num_output_rows FROM st_progress WHERE stream = 'st_chk' ORDER BY batch_id;
SELECT streaming.drop_stream('st_chk', drop_sink => true);
SELECT streaming.drop_source('st_chk_src');

--
-- names with spaces, quotes, upper case and non-ASCII letters (SPEC 7):
-- source and stream names are taken as they are, sink names are SQL
-- identifiers (quote them)
--
\set t st_names:run
\! printf '%s\n' '{"Order Id": 1, "Näme": "x", "say \"hi\"": "q"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "st_names$KAFKA_RUN_ID" -p 0
CREATE SCHEMA "Sink Schema";
SELECT streaming.create_kafka_source('Src "Q" Ünï', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => '"Order Id" bigint, "Näme" text, "say ""hi""" text');
\d "Src ""Q"" Ünï"
SELECT streaming.create_stream('My Stream "X"',
    'SELECT "Order Id", upper("Näme") AS "Upper Näme", "say ""hi""" AS "It''s", kafka_offset AS "Öffset" FROM "Src ""Q"" Ünï"',
    sink => '"Sink Schema"."Sink ""Z"""', start => false);
\d "Sink Schema"."Sink ""Z"""
SELECT name, source, sink FROM streaming.streams WHERE name = 'My Stream "X"';
SELECT streaming.run_batch('My Stream "X"');
SELECT * FROM "Sink Schema"."Sink ""Z""";
SELECT stream, batch_id, num_input_rows, num_output_rows FROM st_progress WHERE stream = 'My Stream "X"';
SELECT streaming.reset('My Stream "X"');
SELECT streaming.drop_source('Src "Q" Ünï');
SELECT streaming.drop_stream('My Stream "X"', drop_sink => true);
SELECT to_regclass('"Sink Schema"."Sink ""Z"""');
SELECT streaming.drop_source('Src "Q" Ünï');
SELECT to_regclass('"Src ""Q"" Ünï"');
DROP SCHEMA "Sink Schema";

-- clean up
SELECT streaming.drop_source('st_orders');
DROP VIEW st_progress, st_lag;
SELECT count(*) FROM streaming.sources;
SELECT count(*) FROM streaming.streams;
