--
-- batch_memory: a batch's groups are capped at half of
-- streaming.batch_memory (SPEC 7); past it they are merged into the state
-- table part-way and the batch goes on.  With the smallest setting (1MB:
-- 512kB for groups, about 2000 of them) batches of thousands of groups
-- merge several times; every sink must still equal a plain GROUP BY: update,
-- complete and append mode, session windows, and dedup before the query.
-- A part-way merge shows in the state table's statistics: in a stream's
-- first batch a state row is updated only when its group was merged
-- before, in the same batch.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment: records
-- are produced with COPY ... TO PROGRAM kcat), KAFKA_RUN_ID (optional topic
-- suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set t bm:run
SELECT set_config('bm.topic', :'t', false);
\i test/regress_helpers.sql

-- record i: key k = i % 3000 (each key every 600 seconds), every 200 ms
-- from 10:00; each record is sent twice, the copy 1500 records later (for
-- dedup: duplicates in other chunks of the batch)
CREATE TABLE bm_input (i int, k int, v int, ts timestamptz, sent boolean DEFAULT false);
CREATE FUNCTION bm_send(lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bm_input (i, k, v, ts)
    SELECT i, i % 3000, i % 97, timestamptz '2024-01-01 10:00:00+00' + i * interval '200 ms'
    FROM generate_series(lo, hi) i;
    PERFORM stm_produce(current_setting('bm.topic'),
        'SELECT json_build_object(''i'', i, ''k'', k, ''v'', v, ''ts'', ts) FROM bm_input, (VALUES (0), (1)) c (copy) '
        'WHERE NOT sent ORDER BY i + 1500 * copy, copy');
    UPDATE bm_input SET sent = true WHERE NOT sent;
END
$$;
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_source('bm_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'i int, k int, v int, ts timestamptz');
\set VERBOSITY default

-- every record counts twice, except in bm_dedup
SELECT streaming.create_stream('bm_update', 'SELECT k, count(*) AS n, sum(v) AS total, avg(v::numeric) AS mean FROM bm_src GROUP BY k',
    output_mode => 'update', start => false);
CREATE VIEW bm_update_expected AS
SELECT k, 2 * count(*) AS n, 2 * sum(v) AS total, avg(v::numeric) AS mean FROM bm_input WHERE sent GROUP BY k;
SELECT streaming.create_stream('bm_complete',
    $$SELECT streaming.window_start() AS ws, k % 2000 AS m, count(*) AS n, sum(v) AS total
      FROM bm_src GROUP BY streaming.tumble(ts, '10 minutes'), k % 2000$$,
    output_mode => 'complete', start => false);
CREATE VIEW bm_complete_expected AS
SELECT date_bin('10 minutes', ts, 'epoch') AS ws, k % 2000 AS m, 2 * count(*) AS n, 2 * sum(v) AS total
FROM bm_input WHERE sent GROUP BY 1, 2;
-- append: the windows the watermark closed (the copies come 300 seconds
-- of event time later, so the delay is larger)
SELECT streaming.create_stream('bm_append',
    $$SELECT streaming.window_start() AS ws, k, count(*) AS n, sum(v) AS total
      FROM bm_src GROUP BY streaming.tumble(ts, '10 minutes'), k$$,
    output_mode => 'append', watermark => '10 minutes', start => false);
CREATE VIEW bm_append_expected AS
SELECT date_bin('10 minutes', ts, 'epoch') AS ws, k, 2 * count(*) AS n, 2 * sum(v) AS total
FROM bm_input WHERE sent GROUP BY 1, 2
HAVING date_bin('10 minutes', ts, 'epoch') + interval '10 minutes' <=
       (SELECT watermark FROM streaming.streams WHERE name = 'bm_append');
-- sessions of k % 2500 (a record at least every 600 s) with a gap of 15
-- minutes: one session per group, growing across the batch's merges
SELECT streaming.create_stream('bm_session',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, k % 2500 AS m, count(*) AS n, sum(v) AS total
      FROM bm_src GROUP BY streaming.session(ts, '15 minutes'), k % 2500$$,
    output_mode => 'update', start => false);
CREATE VIEW bm_session_expected AS
SELECT ws, we, k::int AS m, n, total
FROM stm_sessions('SELECT (k % 2500)::text AS k, v, ts FROM bm_input, (VALUES (0), (1)) c (copy) WHERE sent', '15 minutes');
-- dedup before the query: every copy is a duplicate
SELECT streaming.create_stream('bm_dedup', 'SELECT k, count(*) AS n, sum(v) AS total, avg(v::numeric) AS mean FROM bm_src GROUP BY k',
    output_mode => 'update', dedup_keys => ARRAY['i'], start => false);
CREATE VIEW bm_dedup_expected AS
SELECT k, count(*) AS n, sum(v) AS total, avg(v::numeric) AS mean FROM bm_input WHERE sent GROUP BY k;

-- run every stream's due batches and compare its sink (stm_check); in the
-- first batch, state_updated says that a group was merged part-way
\set streams 'ARRAY[''bm_update'', ''bm_complete'', ''bm_append'', ''bm_session'', ''bm_dedup'']'

-- with the default batch_memory the first batch holds every group in memory:
-- no state row is written twice
SELECT bm_send(1, 6000);
BEGIN;
SELECT stream, batches, missing_from_expected, missing_from_sink, rows, state_updated FROM stm_check(ARRAY['bm_update']);
ROLLBACK;
-- the smallest batch_memory: the first batch merges its groups part-way
SET streaming.batch_memory = '1MB';
SHOW streaming.batch_memory;
BEGIN;
SELECT stream, batches, missing_from_expected, missing_from_sink, rows, state_updated FROM stm_check(:streams);
COMMIT;
-- update mode upserts a group once per part of the batch it is in: more
-- sink rows written than groups
SELECT stream, num_input_rows, num_output_rows > 3000 AS more_than_groups, num_state_rows, num_dedup_rows
FROM streaming.progress WHERE stream IN ('bm_update', 'bm_dedup') ORDER BY stream, batch_id;
-- a second batch: the groups merge with the stored ones, part-way again
SELECT bm_send(6001, 9000);
SELECT stream, batches, missing_from_expected, missing_from_sink, rows FROM stm_check(:streams);
-- a late sentinel closes every window of bm_append
SELECT bm_send(20000, 20000);
SELECT stream, batches, missing_from_expected, missing_from_sink, rows FROM stm_check(:streams);
SELECT sum(n) AS counted FROM bm_append;
RESET streaming.batch_memory;

-- superusers only (SPEC 7)
CREATE ROLE bm_user;
SET ROLE bm_user;
SET streaming.batch_memory = '1MB';
RESET ROLE;
DROP ROLE bm_user;

SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.streams WHERE name LIKE 'bm\_%' ORDER BY name;
SELECT streaming.drop_source('bm_src');
DROP VIEW bm_update_expected, bm_complete_expected, bm_append_expected, bm_session_expected, bm_dedup_expected;
DROP TABLE bm_input;
DROP FUNCTION bm_send(int, int), stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
