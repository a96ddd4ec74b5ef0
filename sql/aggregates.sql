--
-- aggregates: GROUP BY streams with partial aggregate states (SPEC 3 shape
-- 2, 3.2 update and complete modes), run with run_batch.  After every batch
-- the sink must equal a plain GROUP BY over all records read so far.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment: records
-- are produced with COPY ... TO PROGRAM kcat), KAFKA_RUN_ID (optional topic
-- suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET ag.run = :'run';

-- the same orders in a table and, part by part, in a topic
CREATE TABLE ag_orders AS
SELECT g AS id, g % 7 AS customer, (((g * 37) % 1000) / 10.0)::numeric(10,1) AS amount,
       (ARRAY['new', 'paid', 'shipped'])[g % 3 + 1] AS status,
       timestamptz '2024-01-01 10:00:00+00' + g * interval '7 seconds' AS ts
FROM generate_series(1, 3000) g;
CREATE FUNCTION ag_produce(lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (SELECT row_to_json(o) FROM ag_orders o WHERE id BETWEEN %s AND %s ORDER BY id) TO PROGRAM %L',
                   lo, hi, 'kcat -P -b "$KAFKA_BOOTSTRAP" -t ag_orders' || current_setting('ag.run') || ' -p 0');
END
$$;
\set t ag_orders:run
SELECT ag_produce(1, 1000);
SELECT streaming.create_kafka_source('ag_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest',
    columns => 'id bigint, customer int, amount numeric(10,1), status text, ts timestamptz');

-- what a plain GROUP BY over the records read so far gives
CREATE TABLE ag_read (last_id int);
INSERT INTO ag_read VALUES (1000);
CREATE VIEW ag_expected_tumble AS
SELECT date_bin('5 minutes', ts, 'epoch') AS ws, date_bin('5 minutes', ts, 'epoch') + interval '5 minutes' AS we,
       status, count(*) AS n, sum(amount) AS total, avg(amount) AS mean, min(id) AS first_id, max(id) AS last_id,
       sum(customer) AS customers
FROM ag_orders WHERE id <= (SELECT last_id FROM ag_read) GROUP BY 1, 2, 3;

--
-- tumbling windows, update mode
--
SELECT streaming.create_stream('ag_tumble',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status,
             count(*) AS n, sum(amount) AS total, avg(amount) AS mean, min(id) AS first_id, max(id) AS last_id,
             sum(customer) AS customers
      FROM ag_src GROUP BY streaming.tumble(ts, '5 minutes'), status$$,
    output_mode => 'update', start => false);
\d ag_tumble
SELECT streaming.run_batch('ag_tumble');
SELECT * FROM ag_tumble ORDER BY ws, status LIMIT 6;
SELECT (SELECT count(*) FROM (TABLE ag_tumble EXCEPT TABLE ag_expected_tumble) d) AS missing_from_expected,
       (SELECT count(*) FROM (TABLE ag_expected_tumble EXCEPT TABLE ag_tumble) d) AS missing_from_sink,
       (SELECT count(*) FROM ag_tumble) AS groups;
-- two more batches: groups of windows that span batches are combined
SELECT ag_produce(1001, 2200);
SELECT streaming.run_batch('ag_tumble');
SELECT ag_produce(2201, 3000);
SELECT streaming.run_batch('ag_tumble');
SELECT streaming.run_batch('ag_tumble');   -- nothing new
UPDATE ag_read SET last_id = 3000;
SELECT (SELECT count(*) FROM (TABLE ag_tumble EXCEPT TABLE ag_expected_tumble) d) AS missing_from_expected,
       (SELECT count(*) FROM (TABLE ag_expected_tumble EXCEPT TABLE ag_tumble) d) AS missing_from_sink,
       (SELECT count(*) FROM ag_tumble) AS groups;
-- update mode writes the groups each batch changed; the state holds them all
SELECT batch_id, num_input_rows, num_output_rows, num_state_rows FROM streaming.progress
WHERE stream = 'ag_tumble' ORDER BY batch_id;

--
-- sliding windows, complete mode: each record counts in every window that
-- holds it
--
SELECT streaming.create_stream('ag_hop',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we,
             count(*) AS n, sum(amount) AS total, stddev(amount) AS sd
      FROM ag_src GROUP BY streaming.hop(ts, '10 minutes', '4 minutes')$$,
    output_mode => 'complete', start => false);
SELECT streaming.run_batch('ag_hop');
CREATE VIEW ag_expected_hop AS
SELECT w.ws, w.ws + interval '10 minutes' AS we, count(*) AS n, sum(amount) AS total, stddev(amount) AS sd
FROM ag_orders o,
     LATERAL (SELECT date_bin('4 minutes', o.ts, 'epoch') - k * interval '4 minutes' AS ws
              FROM generate_series(0, 2) k) w
WHERE w.ws + interval '10 minutes' > o.ts
GROUP BY 1, 2;
SELECT (SELECT count(*) FROM (TABLE ag_hop EXCEPT TABLE ag_expected_hop) d) AS missing_from_expected,
       (SELECT count(*) FROM (TABLE ag_expected_hop EXCEPT TABLE ag_hop) d) AS missing_from_sink,
       (SELECT sum(n) FROM ag_hop) AS memberships;

--
-- no window (unbounded groups), complete mode, and aggregates whose state
-- is internal (serialized between batches); a user-defined aggregate with
-- a combine function
--
CREATE AGGREGATE ag_total(numeric) (sfunc = numeric_add, stype = numeric,
    combinefunc = numeric_add, initcond = '0');
SELECT streaming.create_stream('ag_global',
    $$SELECT customer, count(*) AS n, sum(amount) AS total, ag_total(amount) AS total2,
             variance(amount) AS var, bool_or(amount > 99) AS any_big, bit_or(id) AS bits,
             round(avg(amount), 3) AS mean_rounded
      FROM ag_src WHERE status <> 'new' GROUP BY customer$$,
    output_mode => 'complete', start => false);
SELECT streaming.run_batch('ag_global');
SELECT * FROM ag_global ORDER BY customer;
CREATE VIEW ag_expected_global AS
SELECT customer, count(*) AS n, sum(amount) AS total, sum(amount) AS total2, variance(amount) AS var,
       bool_or(amount > 99) AS any_big, bit_or(id) AS bits, round(avg(amount), 3) AS mean_rounded
FROM ag_orders WHERE status <> 'new' GROUP BY customer;
SELECT (SELECT count(*) FROM (TABLE ag_global EXCEPT TABLE ag_expected_global) d) AS missing_from_expected,
       (SELECT count(*) FROM (TABLE ag_expected_global EXCEPT TABLE ag_global) d) AS missing_from_sink;
-- one group and no key: a single row, rewritten each batch
SELECT streaming.create_stream('ag_one', 'SELECT count(*) AS n, sum(amount) AS total FROM ag_src',
    output_mode => 'update', start => false);
SELECT streaming.run_batch('ag_one');
SELECT * FROM ag_one;

--
-- a watermark (SPEC 3.1): append mode writes a window's row once, when the
-- watermark (max event time of earlier batches - delay) reaches its end;
-- a row for a closed window is late; after a batch that moved the
-- watermark a batch runs without data
--
\set t ag_wm:run
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_source('ag_wm_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'k text, ts timestamptz');
\set VERBOSITY default
SELECT streaming.create_stream('ag_wm',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, count(*) AS n, min(ts) AS first_ts
      FROM ag_wm_src GROUP BY streaming.tumble(ts, '10 minutes')$$,
    output_mode => 'append', watermark => '5 minutes', late_rows => 'keep', start => false);
CREATE VIEW ag_wm_progress AS
SELECT batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows,
       to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI') AS watermark
FROM streaming.progress WHERE stream = 'ag_wm';
\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:01:00+00"}' '{"k": "b", "ts": "2024-01-01 10:05:00+00"}' '{"k": "c", "ts": "2024-01-01 10:12:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_wm$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_wm');   -- watermark becomes 10:07; nothing closes
SELECT streaming.run_batch('ag_wm');   -- the no-data batch: nothing closes at 10:07
SELECT streaming.run_batch('ag_wm');   -- nothing due
\! printf '%s\n' '{"k": "d", "ts": "2024-01-01 10:03:00+00"}' '{"k": "e", "ts": "2024-01-01 10:25:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_wm$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_wm');   -- 10:03 still counts: its window is open at 10:07
SELECT count(*) AS rows_before_no_data_batch FROM ag_wm;
SELECT streaming.run_batch('ag_wm');   -- watermark 10:20 closes [10:00, 10:10) and [10:10, 10:20)
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, to_char(we AT TIME ZONE 'UTC', 'HH24:MI') AS we, n,
       to_char(first_ts AT TIME ZONE 'UTC', 'HH24:MI') AS first_ts FROM ag_wm ORDER BY ws;
\! printf '%s\n' '{"k": "f", "ts": "2024-01-01 10:09:00+00"}' '{"k": "g", "ts": "2024-01-01 10:31:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_wm$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_wm');   -- 10:09 is late (its window closed), 10:31 opens a window
SELECT streaming.run_batch('ag_wm');   -- watermark 10:26: [10:20, 10:30) stays open
SELECT count(*) AS rows FROM ag_wm;
SELECT * FROM ag_wm_progress ORDER BY batch_id;
SELECT to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI') AS watermark FROM streaming.streams WHERE name = 'ag_wm';
-- late_rows => 'keep': the late row, with its position
SELECT stream, position->'offset' AS "offset", position->'partition' AS partition,
       to_char(event_time AT TIME ZONE 'UTC', 'HH24:MI') AS event_time
FROM streaming.late_rows ORDER BY id;
-- update mode with a watermark: late rows are dropped, closed windows leave the state
SELECT streaming.create_stream('ag_wm_upd',
    $$SELECT streaming.window_start() AS ws, count(*) AS n FROM ag_wm_src GROUP BY streaming.tumble(ts, '10 minutes')$$,
    output_mode => 'update', watermark => '5 minutes', start => false);
SELECT streaming.run_batch('ag_wm_upd');   -- every record so far: watermark 10:26
SELECT streaming.run_batch('ag_wm_upd');   -- no-data batch: [10:00, 10:10) and [10:10, 10:20) evicted
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, n FROM ag_wm_upd ORDER BY ws;
SELECT batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows FROM streaming.progress
WHERE stream = 'ag_wm_upd' ORDER BY batch_id;
-- complete mode drops nothing, even with a watermark
SELECT streaming.create_stream('ag_wm_all',
    $$SELECT streaming.window_start() AS ws, count(*) AS n FROM ag_wm_src GROUP BY streaming.tumble(ts, '10 minutes')$$,
    output_mode => 'complete', watermark => '5 minutes', start => false);
SELECT streaming.run_batch('ag_wm_all');
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, n FROM ag_wm_all ORDER BY ws;
SELECT streaming.create_stream('ag_bad', $$SELECT streaming.window_start() AS ws, count(*) AS n FROM ag_wm_src GROUP BY streaming.tumble(ts, '10 minutes')$$,
    output_mode => 'append', watermark => '5 minutes', event_time => 'k', start => false);

--
-- what aggregate streams refuse in this version
--
SELECT streaming.create_stream('ag_bad', 'SELECT status, count(*) AS n FROM ag_src GROUP BY status', start => false);
SELECT streaming.create_stream('ag_bad', 'SELECT status, count(*) AS n FROM ag_src GROUP BY status',
    output_mode => 'append', watermark => '1 minute', event_time => 'ts', start => false);
SELECT streaming.create_stream('ag_bad', $$SELECT streaming.window_start() AS ws, count(*) AS n FROM ag_src GROUP BY streaming.session(ts, '0 minutes')$$,
    output_mode => 'update', start => false);
SELECT streaming.create_stream('ag_bad', $$SELECT count(*) AS n FROM ag_src GROUP BY streaming.tumble(ts, '1 minute'), status$$,
    output_mode => 'update', start => false);
SELECT streaming.create_stream('ag_bad', $$SELECT streaming.window_start() AS ws, count(*) AS n FROM ag_src GROUP BY streaming.tumble(ts, '1 minute'), status$$,
    output_mode => 'update', start => false);
-- update mode upserts: an existing sink needs a key on the window and group columns
CREATE TABLE ag_nokey (ws timestamptz, status text, n bigint);
SELECT streaming.create_stream('ag_bad', $$SELECT streaming.window_start() AS ws, status, count(*) AS n FROM ag_src GROUP BY streaming.tumble(ts, '1 minute'), status$$,
    sink => 'ag_nokey', output_mode => 'update', start => false);
CREATE UNIQUE INDEX ON ag_nokey (status, ws) NULLS NOT DISTINCT;
SELECT streaming.create_stream('ag_keyed', $$SELECT streaming.window_start() AS ws, status, count(*) AS n FROM ag_src GROUP BY streaming.tumble(ts, '1 minute'), status$$,
    sink => 'ag_nokey', output_mode => 'update', start => false);
SELECT streaming.drop_stream('ag_keyed');
DROP TABLE ag_nokey;
-- groups are found by hashing: a group type without a hash function is refused
SELECT streaming.create_stream('ag_bad', $$SELECT to_tsvector('simple', status) AS t, count(*) AS n FROM ag_src GROUP BY to_tsvector('simple', status)$$,
    output_mode => 'update', start => false);
CREATE AGGREGATE ag_no_combine(numeric) (sfunc = numeric_add, stype = numeric, initcond = '0');
SELECT streaming.create_stream('ag_bad', 'SELECT status, ag_no_combine(amount) AS n FROM ag_src GROUP BY status',
    output_mode => 'update', start => false);
SELECT to_regclass('ag_bad') AS no_sink_left, (SELECT count(*) FROM streaming.streams WHERE name = 'ag_bad') AS no_stream_left;

--
-- groups are told apart by equality, as GROUP BY does: numeric 1, 1.0 and
-- 1.00 are one group, float8 0 and -0 another, in a batch and across batches
--
\set t ag_eq:run
\set VERBOSITY terse
SELECT streaming.create_kafka_source('ag_eq_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'v numeric, f float8');
\set VERBOSITY default
SELECT streaming.create_stream('ag_eq_v', 'SELECT v, count(*) AS n FROM ag_eq_src GROUP BY v',
    output_mode => 'update', start => false);
SELECT streaming.create_stream('ag_eq_f', 'SELECT f, count(*) AS n FROM ag_eq_src GROUP BY f',
    output_mode => 'complete', start => false);
\! printf '%s\n' '{"v": 1, "f": 0}' '{"v": 2.5, "f": 1}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_eq$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_eq_v'), streaming.run_batch('ag_eq_f');
\! printf '%s\n' '{"v": 1.0, "f": -0.0}' '{"v": 1.00, "f": 1.0}' '{"v": 2.50, "f": -0}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_eq$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_eq_v'), streaming.run_batch('ag_eq_f');
SELECT v, n FROM ag_eq_v ORDER BY v;
SELECT f, n FROM ag_eq_f ORDER BY f;
SELECT streaming.drop_stream('ag_eq_v', drop_sink => true), streaming.drop_stream('ag_eq_f', drop_sink => true);
SELECT streaming.drop_source('ag_eq_src');

--
-- reset forgets the state; drop_stream drops it
--
SELECT format('streaming.state_%s', id) AS state FROM streaming.stream_defs WHERE name = 'ag_global' \gset
SELECT count(*) AS state_rows FROM :state;
SELECT streaming.reset('ag_global');
SELECT count(*) AS state_rows FROM :state;
SELECT streaming.run_batch('ag_global');
SELECT count(*) AS state_rows FROM :state;
SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.streams WHERE name LIKE 'ag\_%' ORDER BY name;
SELECT count(*) AS state_tables_left FROM pg_tables WHERE schemaname = 'streaming' AND tablename LIKE 'state\_%';
SELECT streaming.drop_source('ag_src');
SELECT streaming.drop_source('ag_wm_src');
DROP VIEW ag_expected_tumble, ag_expected_hop, ag_expected_global, ag_wm_progress;
DROP TABLE ag_orders, ag_read;
DROP FUNCTION ag_produce(int, int);
DROP AGGREGATE ag_total(numeric);
DROP AGGREGATE ag_no_combine(numeric);

--
-- sink_function (foreachBatch, SPEC 3.2): called in the batch's transaction
-- with a temporary table of the batch's output rows; here, the MERGE upsert
-- into a silver table that Spark users write in foreachBatch
--
\set t ag_fb:run
\set VERBOSITY terse
SELECT streaming.create_kafka_source('ag_fb_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'k text, v int');
\set VERBOSITY default
CREATE TABLE ag_silver (k text PRIMARY KEY, n bigint, total bigint, last_batch bigint);
CREATE FUNCTION ag_merge(batch_id bigint, batch regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format($m$
        MERGE INTO ag_silver s USING %s b ON s.k = b.k
        WHEN MATCHED THEN UPDATE SET n = b.n, total = b.total, last_batch = %s
        WHEN NOT MATCHED THEN INSERT VALUES (b.k, b.n, b.total, %s)$m$, batch, batch_id, batch_id);
END
$$;
SELECT streaming.create_stream('ag_fb', 'SELECT k, count(*) AS n, sum(v) AS total FROM ag_fb_src GROUP BY k',
    output_mode => 'update', sink_function => 'ag_merge(bigint, regclass)', start => false);
SELECT sink FROM streaming.streams WHERE name = 'ag_fb';
\! printf '%s\n' '{"k": "x", "v": 1}' '{"k": "y", "v": 2}' '{"k": "x", "v": 3}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_fb$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_fb');
\! printf '%s\n' '{"k": "x", "v": 10}' '{"k": "z", "v": 5}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_fb$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ag_fb');
SELECT * FROM ag_silver ORDER BY k;
-- a stateless stream's batch table holds its new rows
CREATE TABLE ag_seen (batch_id bigint, rows bigint);
CREATE FUNCTION ag_count(batch_id bigint, batch regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO ag_seen SELECT %s, count(*) FROM %s', batch_id, batch);
END
$$;
SELECT streaming.create_stream('ag_fb2', 'SELECT k, v FROM ag_fb_src WHERE v > 1',
    sink_function => 'ag_count(bigint, regclass)', start => false);
SELECT streaming.run_batch('ag_fb2');
SELECT * FROM ag_seen;
-- the function must take (bigint, regclass); sink and sink_function exclude each other
SELECT streaming.create_stream('ag_bad', 'SELECT k, v FROM ag_fb_src', sink_function => 'ag_produce(int, int)', start => false);
SELECT streaming.create_stream('ag_bad', 'SELECT k, v FROM ag_fb_src', sink => 'ag_seen',
    sink_function => 'ag_count(bigint, regclass)', start => false);
SELECT streaming.drop_stream('ag_fb');
SELECT streaming.drop_stream('ag_fb2');
SELECT streaming.drop_source('ag_fb_src');
DROP TABLE ag_silver, ag_seen;
DROP FUNCTION ag_merge(bigint, regclass), ag_count(bigint, regclass);

--
-- dedup_keys (SPEC 3.3): the first row of each key, before the query
--
\set t ag_dd:run
\set VERBOSITY terse
SELECT streaming.create_kafka_source('ag_dd_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'k text, ts timestamptz');
\set VERBOSITY default
-- without a watermark: keys are kept for ever
SELECT streaming.create_stream('ag_dd', 'SELECT k, ts FROM ag_dd_src', dedup_keys => ARRAY['k'], start => false);
-- with a watermark and the event time among the keys: late rows dropped, keys expire
SELECT streaming.create_stream('ag_dd_ts', 'SELECT k, ts FROM ag_dd_src', dedup_keys => ARRAY['k', 'ts'],
    watermark => '5 minutes', event_time => 'ts', late_rows => 'keep', start => false);
-- within the watermark: a key is remembered until its first event time + delay
SELECT streaming.create_stream('ag_dd_within', 'SELECT k, ts FROM ag_dd_src', dedup_keys => ARRAY['k'],
    watermark => '5 minutes', event_time => 'ts', dedup_within_watermark => true, start => false);
-- dedup, then aggregate
SELECT streaming.create_stream('ag_dd_count', 'SELECT k, count(*) AS n FROM ag_dd_src GROUP BY k',
    output_mode => 'complete', dedup_keys => ARRAY['k', 'ts'], start => false);
CREATE FUNCTION ag_dd_batch() RETURNS TABLE (stream text, batch bigint) LANGUAGE sql AS $$
    SELECT s, streaming.run_batch(s) FROM unnest(ARRAY['ag_dd', 'ag_dd_ts', 'ag_dd_within', 'ag_dd_count']) s
$$;
\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:00:00+00"}' '{"k": "b", "ts": "2024-01-01 10:01:00+00"}' '{"k": "a", "ts": "2024-01-01 10:00:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_dd$KAFKA_RUN_ID" -p 0
SELECT * FROM ag_dd_batch();
\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:10:00+00"}' '{"k": "c", "ts": "2024-01-01 10:11:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_dd$KAFKA_RUN_ID" -p 0
SELECT * FROM ag_dd_batch();
SELECT * FROM ag_dd_batch();   -- the no-data batches: keys the watermark (10:06) passed are forgotten
\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:00:00+00"}' '{"k": "a", "ts": "2024-01-01 10:20:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ag_dd$KAFKA_RUN_ID" -p 0
SELECT * FROM ag_dd_batch();
SELECT 'ag_dd' AS stream, k, to_char(ts AT TIME ZONE 'UTC', 'HH24:MI') AS ts FROM ag_dd
UNION ALL SELECT 'ag_dd_ts', k, to_char(ts AT TIME ZONE 'UTC', 'HH24:MI') FROM ag_dd_ts
UNION ALL SELECT 'ag_dd_within', k, to_char(ts AT TIME ZONE 'UTC', 'HH24:MI') FROM ag_dd_within
ORDER BY 1, 2, 3;
SELECT * FROM ag_dd_count ORDER BY k;
SELECT stream, position->'offset' AS "offset", to_char(event_time AT TIME ZONE 'UTC', 'HH24:MI') AS event_time
FROM streaming.late_rows WHERE stream LIKE 'ag\_dd%' ORDER BY id;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_dedup_rows, num_late_rows, num_state_rows
FROM streaming.progress WHERE stream LIKE 'ag\_dd%' ORDER BY stream, batch_id;
SELECT streaming.create_stream('ag_bad', 'SELECT k FROM ag_dd_src', dedup_keys => ARRAY['nope'], start => false);
SELECT streaming.create_stream('ag_bad', 'SELECT k FROM ag_dd_src', dedup_keys => ARRAY['k'], dedup_within_watermark => true, start => false);
SELECT streaming.drop_stream(s, drop_sink => true) FROM unnest(ARRAY['ag_dd', 'ag_dd_ts', 'ag_dd_within', 'ag_dd_count']) s;
SELECT count(*) AS dedup_tables_left FROM pg_tables WHERE schemaname = 'streaming' AND tablename LIKE 'dedup\_%';
SELECT streaming.drop_source('ag_dd_src');
DROP FUNCTION ag_dd_batch();
