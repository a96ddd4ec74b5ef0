--
-- kept_plans: a batch writes its aggregate state and its sink's changes
-- from named tuplestores with statements whose plans each process keeps
-- (sql.c, stm_spi_kept_plan_reading), by their text and the tuplestore's
-- row type.  In one session: a second stream that writes the same sink
-- with the same statement text but other column types gets a plan of its
-- own (a plan made for the first would read an integer as a numeric), and
-- a sink table altered between batches is planned again.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment: records
-- are produced with COPY ... TO PROGRAM kcat), KAFKA_RUN_ID (optional topic
-- suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set t kp:run
SELECT set_config('kp.topic', :'t', false);
\i test/regress_helpers.sql
\set VERBOSITY terse
SELECT streaming.create_kafka_source('kp_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'g text, v int');
\set VERBOSITY default
SELECT stm_produce(current_setting('kp.topic'),
    $$SELECT json_build_object('g', g, 'v', v) FROM (VALUES ('a', 1), ('b', 2), ('a', 3)) r(g, v)$$);

-- the sink's total is numeric, and the first stream gives a numeric
SELECT streaming.create_stream('kp_num', $$SELECT g, sum(v)::numeric AS total FROM kp_src GROUP BY g$$,
    sink => 'kp_sink', output_mode => 'update', start => false);
SELECT streaming.run_batch('kp_num') IS NOT NULL AS ran;
SELECT g, total, pg_typeof(total) FROM kp_sink ORDER BY g;
SELECT streaming.drop_stream('kp_num');

-- the second gives an integer into the same column (it reads every record)
SELECT stm_produce(current_setting('kp.topic'),
    $$SELECT json_build_object('g', g, 'v', v) FROM (VALUES ('a', 10), ('c', 20)) r(g, v)$$);
SELECT streaming.create_stream('kp_int', $$SELECT g, sum(v)::int AS total FROM kp_src GROUP BY g$$,
    sink => 'kp_sink', output_mode => 'update', start => false);
SELECT streaming.run_batch('kp_int') IS NOT NULL AS ran;
SELECT g, total FROM kp_sink ORDER BY g;

-- a column added to the sink between two batches takes its default
ALTER TABLE kp_sink ADD COLUMN note text DEFAULT 'added';
SELECT stm_produce(current_setting('kp.topic'),
    $$SELECT json_build_object('g', g, 'v', v) FROM (VALUES ('c', 5), ('d', 7)) r(g, v)$$);
SELECT streaming.run_batch('kp_int') IS NOT NULL AS ran;
SELECT g, total, note FROM kp_sink ORDER BY g;

SELECT streaming.drop_stream('kp_int');
SELECT streaming.drop_source('kp_src');
DROP TABLE kp_sink;
