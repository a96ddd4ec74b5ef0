--
-- api_errors: wrong arguments fail at once, say which argument and what is
-- allowed, and leave nothing behind (SPEC 2.1, 3, 4, 5).
--
-- No broker is needed: creating a source does not connect.
--
CREATE ROLE regress_ae_user;
GRANT CREATE ON SCHEMA public TO regress_ae_user;

-- fixtures: one good source and stream, a plain table, a plain view
SELECT streaming.create_kafka_source('ae_src', 'broker.invalid:9092', topics => ARRAY['ae'],
    columns => 'id bigint, name text, amount numeric, ts timestamptz');
SELECT streaming.create_stream('ae_st', 'SELECT id, name FROM ae_src', start => false);
CREATE TABLE ae_plain (a int);
CREATE VIEW ae_view AS SELECT 1 AS id;

-- SQLSTATE and message of an error, for errors about text inside an
-- argument (their position is not that of the calling statement)
CREATE FUNCTION ae_error(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END $$;

-- what is left behind: every object the failing calls below would create
-- is named bad...
CREATE VIEW ae_leftovers AS
SELECT (SELECT string_agg(name, ', ' ORDER BY name) FROM streaming.sources) AS sources,
       (SELECT string_agg(name, ', ' ORDER BY name) FROM streaming.stream_defs) AS streams,
       (SELECT string_agg(relname, ', ' ORDER BY relname) FROM pg_class
        WHERE relnamespace = 'public'::regnamespace AND relname LIKE 'bad%') AS relations,
       (SELECT count(*) FROM streaming.positions) AS positions;
SELECT * FROM ae_leftovers;

--
-- create_kafka_source
--
-- arguments that must not be null
SELECT streaming.create_kafka_source(NULL, 'b:9092', topics => ARRAY['t']);
SELECT streaming.create_kafka_source('bad', NULL, topics => ARRAY['t']);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => NULL);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], format => NULL);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], max_trigger_delay => NULL);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], fail_on_data_loss => NULL);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], include_headers => NULL);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], on_bad_record => NULL);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => NULL);
-- name
SELECT streaming.create_kafka_source('', 'b:9092', topics => ARRAY['t']);
SELECT streaming.create_kafka_source(repeat('bad', 22), 'b:9092', topics => ARRAY['t']);
SELECT streaming.create_kafka_source('ae_src', 'b:9092', topics => ARRAY['t']);
-- a relation of that name exists
\set VERBOSITY terse
SELECT streaming.create_kafka_source('ae_plain', 'b:9092', topics => ARRAY['t']);
\set VERBOSITY default
-- bootstrap_servers
SELECT streaming.create_kafka_source('bad', '', topics => ARRAY['t']);
-- exactly one of topics, topic_pattern, partitions
SELECT streaming.create_kafka_source('bad', 'b:9092');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], topic_pattern => 't.*');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], topic_pattern => 't.*',
    partitions => '{"t": [0]}');
-- topics
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY[]::text[]);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t', NULL]);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['']);
-- topic_pattern
SELECT streaming.create_kafka_source('bad', 'b:9092', topic_pattern => '');
-- partitions
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '[0, 1]');
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '{}');
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '{"t": 0}');
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '{"t": []}');
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '{"t": [-1]}');
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '{"t": [1.5]}');
SELECT streaming.create_kafka_source('bad', 'b:9092', partitions => '{"t": ["0"]}');
-- starting_offsets
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => 'first');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => '{"t": 5}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => '{"t": {"0": -3}}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => '{"t": {"x": 1}}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => '{"t": {"0": 1.5}}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], starting_offsets => '[{"t": {"0": 1}}]');
-- format and columns
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], format => 'avro');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], format => 'csv');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], format => 'text', columns => 'a int');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], format => 'bytes', columns => 'a int');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => '');
SELECT ae_error($$SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a')$$);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a int, b no_such_type');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a int NOT NULL');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a int DEFAULT 1');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a int, a text');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a int, kafka_offset bigint');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], columns => 'a int); DROP TABLE ae_plain; --');
-- limits
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], max_offsets_per_trigger => 0);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], max_offsets_per_trigger => -5);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], min_offsets_per_trigger => 0);
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], max_trigger_delay => '0');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], max_trigger_delay => '-1 minute');
-- on_bad_record
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], on_bad_record => 'ignore');
-- kafka_options
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '[]');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"client.id": {"a": 1}}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"client.id": null}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"bootstrap.servers": "x:1"}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"no.such.property": "1"}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"fetch.wait.max.ms": "soon"}');
-- properties that read files or load code are for superusers only (SPEC 7)
SET ROLE regress_ae_user;
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"ssl.ca.location": "/etc/passwd"}');
SELECT streaming.create_kafka_source('bad', 'b:9092', topics => ARRAY['t'], kafka_options => '{"plugin.library.paths": "x"}');
-- ... while those on the allowlist are fine
SELECT streaming.create_kafka_source('ae_user_src', 'b:9092', topics => ARRAY['t'], kafka_options => '{"client.id": "me"}');
SELECT streaming.drop_source('ae_user_src');
RESET ROLE;

SELECT * FROM ae_leftovers;

--
-- create_stream
--
-- arguments that must not be null
SELECT streaming.create_stream(NULL, 'SELECT id FROM ae_src', start => false);
SELECT streaming.create_stream('bad', NULL, start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', output_mode => NULL, start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', dedup_within_watermark => NULL, start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', trigger => NULL, start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', late_rows => NULL, start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', start => NULL);
-- name
SELECT streaming.create_stream('', 'SELECT id FROM ae_src', start => false);
SELECT streaming.create_stream('ae_st', 'SELECT id FROM ae_src', sink => 'bad_sink', start => false);
-- output_mode, late_rows, trigger
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', output_mode => 'upsert', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', late_rows => 'ignore', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', trigger => 'soon', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', trigger => '-5 seconds', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', trigger => 'continuously', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', trigger => 'continuous 5 ms', start => false);
-- trigger continuous: accepted, stored as given and shown in streaming.streams
SELECT streaming.create_stream('ae_cont', 'SELECT id FROM ae_src', trigger => 'continuous', start => false);
SELECT name, trigger FROM streaming.streams WHERE name = 'ae_cont';
SELECT streaming.drop_stream('ae_cont', drop_sink => true);
-- dedup_keys: source columns; dedup_within_watermark needs a watermark
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', dedup_keys => ARRAY['no_such'], start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', dedup_keys => ARRAY[]::text[], start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', dedup_within_watermark => true, start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', sink_function => 'abs(integer)', start => false);
-- watermark, idle_timeout, event_time
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', watermark => '-1 minute', event_time => 'ts', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', idle_timeout => '0', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', idle_timeout => '1 minute', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', watermark => '1 minute', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', event_time => 'no_such', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', event_time => 'name', start => false);
-- complete mode needs an aggregate
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', output_mode => 'complete', start => false);

SELECT * FROM ae_leftovers;

-- the query: one SELECT ...
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src; SELECT id FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'INSERT INTO ae_plain VALUES (1)', start => false);
SELECT streaming.create_stream('bad', '', start => false);
SELECT ae_error($$SELECT streaming.create_stream('bad', 'SELEC id FROM ae_src', start => false)$$);
SELECT ae_error($$SELECT streaming.create_stream('bad', 'SELECT no_such FROM ae_src', start => false)$$);
-- ... of a supported shape
SELECT streaming.create_stream('bad', 'SELECT name, count(*) AS n FROM ae_src GROUP BY name', start => false);
SELECT streaming.create_stream('bad', 'SELECT count(*) AS n FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT x.id FROM ae_src x, ae_src y', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM (SELECT id FROM ae_src) s', start => false);
SELECT streaming.create_stream('bad', 'SELECT id, row_number() OVER () AS rn FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT DISTINCT id FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT DISTINCT ON (id) id, name FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src ORDER BY id', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src LIMIT 10', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src OFFSET 1', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src UNION ALL SELECT id FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'WITH w AS (SELECT id FROM ae_src) SELECT id FROM w', start => false);
SELECT streaming.create_stream('bad', 'SELECT generate_series(1, 3) AS g FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src FOR UPDATE', start => false);
SELECT streaming.create_stream('bad', 'SELECT 1 AS one', start => false);
SELECT streaming.create_stream('bad', 'VALUES (1)', start => false);
SELECT streaming.create_stream('bad', 'SELECT g FROM generate_series(1, 3) g', start => false);
-- ... whose columns all have names, once
SELECT streaming.create_stream('bad', 'SELECT id + 1 FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT id, id * 2, name FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT id, name AS id FROM ae_src', start => false);
-- ... over a source, not a table or another view
SELECT streaming.create_stream('bad', 'SELECT a FROM ae_plain', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_view', start => false);
SELECT ae_error($$SELECT streaming.create_stream('bad', 'SELECT id FROM no_such_relation', start => false)$$);

SELECT * FROM ae_leftovers;

-- an existing sink: a column for every output column, of a compatible type
CREATE TABLE ae_sink_missing (id bigint);
CREATE TABLE ae_sink_type (id bigint, name int);
SELECT streaming.create_stream('bad', 'SELECT id, name FROM ae_src', sink => 'ae_sink_missing', start => false);
SELECT streaming.create_stream('bad', 'SELECT id, name FROM ae_src', sink => 'ae_sink_type', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', sink => 'ae_view', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', sink => 'ae_src', start => false);
SELECT streaming.create_stream('ae_src', 'SELECT id FROM ae_src', start => false);
SELECT streaming.create_stream('bad', 'SELECT id FROM ae_src', sink => 'no_such_schema.bad_sink', start => false);
-- the sinks are unchanged
\d ae_sink_missing
\d ae_sink_type

SELECT * FROM ae_leftovers;

--
-- control functions: unknown names
--
SELECT streaming.start('no_such');
SELECT streaming.stop('no_such');
-- window calls: one, in the GROUP BY, with constant fixed sizes; aggregates
-- that can be computed in parts
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts, '0 minutes'), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts, '-5 minutes'), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts, '1 month'), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts, NULL), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts, '5 minutes' + (random() * interval '1 minute')), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.hop(ts, '5 minutes', '10 minutes'), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.hop(ts, '5 minutes', '0 seconds'), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY streaming.session(ts, '0 seconds'), name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts, '5 minutes'), streaming.hop(ts, '10 minutes', '5 minutes')$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT count(*) AS n FROM ae_src GROUP BY streaming.tumble(ts + interval '1 hour', '5 minutes')$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT streaming.tumble(ts, '5 minutes') AS w FROM ae_src$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT id FROM ae_src WHERE streaming.tumble(ts, '5 minutes') > now()$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT streaming.window_start() AS ws FROM ae_src$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT streaming.window_end() AS we, count(*) AS n FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, array_agg(id) AS ids FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, string_agg(name, ',') AS s FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(DISTINCT id) AS n FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, sum(amount ORDER BY id) AS n FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, sum(amount) FILTER (WHERE amount > 0) AS n FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, percentile_cont(0.5) WITHIN GROUP (ORDER BY amount) AS p FROM ae_src GROUP BY name$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY ROLLUP (name)$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT name, count(*) AS n FROM ae_src GROUP BY name HAVING count(*) > 1$$, start => false);
-- valid windowed aggregates pass these checks; append mode needs a watermark
SELECT streaming.create_stream('bad', $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, name, count(*) AS n, sum(amount) AS total, avg(amount) AS mean FROM ae_src GROUP BY streaming.tumble(ts, '5 minutes'), name$$, start => false);
-- outside a stream query, window calls raise an error
SELECT streaming.tumble(now(), '5 minutes');
SELECT streaming.hop(now(), '5 minutes', '1 minute');
SELECT streaming.session(now(), '5 minutes');
SELECT streaming.window_start();
SELECT streaming.window_end();

SELECT streaming.run_batch('no_such');
SELECT streaming.reset('no_such');
SELECT streaming.drop_stream('no_such');
SELECT streaming.drop_stream('no_such', drop_sink => true);
SELECT streaming.process_available('no_such');
SELECT streaming.drop_source('no_such');
-- a stream name is not a source name, and the other way round
SELECT streaming.drop_source('ae_st');
SELECT streaming.drop_stream('ae_src');
SELECT streaming.run_batch('ae_src');
-- process_available: a positive timeout, a running stream
SELECT streaming.process_available('ae_st', '0');
SELECT streaming.process_available('ae_st');

SELECT * FROM ae_leftovers;

-- the fixtures still work: nothing above broke them
SELECT name, source, sink, output_mode, trigger, status, last_batch_id FROM streaming.streams;
\d ae_st

-- clean up
SELECT streaming.drop_stream('ae_st', drop_sink => true);
SELECT streaming.drop_source('ae_src');
DROP TABLE ae_plain, ae_sink_missing, ae_sink_type;
DROP VIEW ae_view;
DROP FUNCTION ae_error(text);
SELECT * FROM ae_leftovers;
DROP VIEW ae_leftovers;
REVOKE CREATE ON SCHEMA public FROM regress_ae_user;
DROP ROLE regress_ae_user;
