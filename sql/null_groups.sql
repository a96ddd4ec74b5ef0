--
-- null_groups: NULL is one group, as in GROUP BY (SPEC 3): update and
-- complete sinks get a unique key that treats NULLs as equal (UNIQUE NULLS
-- NOT DISTINCT) and are upserted with it; state tables find a NULL group
-- like any other.  A NULL in a text and in an integer group column, next to
-- non-NULL groups, with and without windows, in every output mode, across
-- batches; after each batch every sink must equal a plain GROUP BY over the
-- records read so far.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment: records
-- are produced with COPY ... TO PROGRAM kcat), KAFKA_RUN_ID (optional topic
-- suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set t nl:run
SELECT set_config('nl.topic', :'t', false);
\i test/regress_helpers.sql

-- every record is also kept here, to compute what the sinks must hold
CREATE TABLE nl_input (id serial, g text, n int, v int, ts timestamptz, sent boolean DEFAULT false);
CREATE FUNCTION nl_send() RETURNS void LANGUAGE sql AS $$
    SELECT stm_produce(current_setting('nl.topic'),
        'SELECT json_build_object(''g'', g, ''n'', n, ''v'', v, ''ts'', ts) FROM nl_input WHERE NOT sent ORDER BY id');
    UPDATE nl_input SET sent = true WHERE NOT sent;
$$;
-- rows every 80 seconds from 10:00; g is NULL in every third, n in every fourth
CREATE FUNCTION nl_rows(lo int, hi int) RETURNS void LANGUAGE sql AS $$
    INSERT INTO nl_input (g, n, v, ts)
    SELECT (ARRAY[NULL, 'a', 'b'])[i % 3 + 1], (ARRAY[NULL, 1, 2, 3])[i % 4 + 1], i,
           timestamptz '2024-01-01 10:00:00+00' + i * interval '80 seconds'
    FROM generate_series(lo, hi) i
$$;
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_source('nl_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'g text, n int, v int, ts timestamptz');
\set VERBOSITY default

-- the streams and what plain SQL says they must hold
SELECT streaming.create_stream('nl_upd', 'SELECT g, n, count(*) AS c, sum(v) AS total FROM nl_src GROUP BY g, n',
    output_mode => 'update', start => false);
CREATE VIEW nl_upd_expected AS
SELECT g, n, count(*) AS c, sum(v) AS total FROM nl_input WHERE sent GROUP BY g, n;
SELECT streaming.create_stream('nl_all',
    $$SELECT n, count(*) AS c, sum(v) AS total FROM nl_src GROUP BY n$$,
    output_mode => 'complete', start => false);
CREATE VIEW nl_all_expected AS
SELECT n, count(*) AS c, sum(v) AS total FROM nl_input WHERE sent GROUP BY n;
SELECT streaming.create_stream('nl_upd_w',
    $$SELECT streaming.window_start() AS ws, n, g, count(*) AS c, sum(v) AS total
      FROM nl_src GROUP BY streaming.tumble(ts, '10 minutes'), n, g$$,
    output_mode => 'update', start => false);
CREATE VIEW nl_upd_w_expected AS
SELECT date_bin('10 minutes', ts, 'epoch') AS ws, n, g, count(*) AS c, sum(v) AS total
FROM nl_input WHERE sent GROUP BY 1, 2, 3;
SELECT streaming.create_stream('nl_all_w',
    $$SELECT streaming.window_start() AS ws, g, count(*) AS c, sum(v) AS total
      FROM nl_src GROUP BY streaming.tumble(ts, '10 minutes'), g$$,
    output_mode => 'complete', start => false);
CREATE VIEW nl_all_w_expected AS
SELECT date_bin('10 minutes', ts, 'epoch') AS ws, g, count(*) AS c, sum(v) AS total
FROM nl_input WHERE sent GROUP BY 1, 2;
-- append: the windows the watermark closed
SELECT streaming.create_stream('nl_app',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, g, n, count(*) AS c, sum(v) AS total
      FROM nl_src GROUP BY streaming.tumble(ts, '10 minutes'), g, n$$,
    output_mode => 'append', watermark => '1 hour', start => false);
CREATE VIEW nl_app_expected AS
SELECT date_bin('10 minutes', ts, 'epoch') AS ws, date_bin('10 minutes', ts, 'epoch') + interval '10 minutes' AS we,
       g, n, count(*) AS c, sum(v) AS total
FROM nl_input WHERE sent GROUP BY 1, 2, 3, 4
HAVING date_bin('10 minutes', ts, 'epoch') + interval '10 minutes' <= (SELECT watermark FROM streaming.streams WHERE name = 'nl_app');
-- sessions of each g, NULL one of them (gaps and islands)
SELECT streaming.create_stream('nl_ses',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, g, count(*) AS c, sum(v) AS total
      FROM nl_src GROUP BY streaming.session(ts, '5 minutes'), g$$,
    output_mode => 'update', start => false);
CREATE VIEW nl_ses_expected AS
SELECT ws, we, k AS g, n AS c, total FROM stm_sessions('SELECT g AS k, v, ts FROM nl_input WHERE sent', '5 minutes');
\d nl_upd
\d nl_upd_w
\d nl_app

-- after each batch: run every stream's due batches, then compare each
-- sink with its expected rows (stm_check: NULLs are equal, as in GROUP BY)
\set streams 'ARRAY[''nl_upd'', ''nl_all'', ''nl_upd_w'', ''nl_all_w'', ''nl_app'', ''nl_ses'']'

-- batch 1: NULL groups from the first batch on; g's NULL sessions
-- [10:04, 10:45), [11:00, 11:05) and [11:20, 11:25)
SELECT nl_rows(1, 30);
INSERT INTO nl_input (g, n, v, ts) VALUES
    (NULL, NULL, 100, '2024-01-01 11:00:00+00'), (NULL, 7, 101, '2024-01-01 11:20:00+00');
SELECT nl_send();
SELECT stream, batches, missing_from_expected, missing_from_sink, rows, null_rows FROM stm_check(:streams);
-- batch 2: the NULL groups grow; rows every four minutes join g's NULL
-- sessions into one [10:04, 11:25), whose start the first one keeps: the
-- other two leave state and sink (their sink rows are found by IS NULL)
SELECT nl_rows(31, 60);
SELECT nl_send();
SELECT stream, batches, missing_from_expected, missing_from_sink, rows, null_rows FROM stm_check(:streams);
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, to_char(we AT TIME ZONE 'UTC', 'HH24:MI') AS we, c
FROM nl_ses WHERE g IS NULL ORDER BY ws;
-- batch 3: a late sentinel closes every window of the append stream
INSERT INTO nl_input (g, n, v, ts) VALUES (NULL, NULL, 1000, '2024-01-01 13:00:00+00');
SELECT nl_send();
SELECT stream, batches, missing_from_expected, missing_from_sink, rows, null_rows FROM stm_check(:streams);
SELECT g, n, c, total FROM nl_upd ORDER BY g NULLS FIRST, n NULLS FIRST;
-- one state row per group, NULL ones too
SELECT format('streaming.state_%s', id) AS state FROM streaming.stream_defs WHERE name = 'nl_upd' \gset
SELECT count(*) AS state_rows, count(*) FILTER (WHERE key_1 IS NULL) AS null_g,
       count(*) FILTER (WHERE key_2 IS NULL) AS null_n, count(DISTINCT group_key) AS keys FROM :state;

-- an existing sink in update mode: a unique index that treats NULLs as
-- equal, or a primary key (non-NULL groups only: a NULL one fails its batch)
CREATE TABLE nl_sink (g text, c bigint);
CREATE UNIQUE INDEX nl_sink_g ON nl_sink (g);
SELECT streaming.create_stream('nl_bad', 'SELECT g, count(*) AS c FROM nl_src GROUP BY g',
    sink => 'nl_sink', output_mode => 'update', start => false);
DROP INDEX nl_sink_g;
CREATE UNIQUE INDEX nl_sink_g ON nl_sink (g) NULLS NOT DISTINCT;
SELECT streaming.create_stream('nl_own', 'SELECT g, count(*) AS c FROM nl_src GROUP BY g',
    sink => 'nl_sink', output_mode => 'update', start => false);
SELECT streaming.run_batch('nl_own');
SELECT g, c FROM nl_sink ORDER BY g NULLS FIRST;
CREATE TABLE nl_pk (g text PRIMARY KEY, c bigint);
SELECT streaming.create_stream('nl_pk_nonnull', 'SELECT g, count(*) AS c FROM nl_src WHERE g IS NOT NULL GROUP BY g',
    sink => 'nl_pk', output_mode => 'update', start => false);
SELECT streaming.run_batch('nl_pk_nonnull');
SELECT g, c FROM nl_pk ORDER BY g;
SELECT streaming.drop_stream('nl_pk_nonnull');
SELECT streaming.create_stream('nl_pk_null', 'SELECT g, count(*) AS c FROM nl_src GROUP BY g',
    sink => 'nl_pk', output_mode => 'update', start => false);
SELECT streaming.run_batch('nl_pk_null');

SELECT streaming.drop_stream(name, drop_sink => name NOT IN ('nl_own', 'nl_pk_null'))
FROM streaming.streams WHERE name LIKE 'nl\_%' ORDER BY name;
SELECT streaming.drop_source('nl_src');
DROP VIEW nl_upd_expected, nl_all_expected, nl_upd_w_expected, nl_all_w_expected, nl_app_expected, nl_ses_expected;
DROP TABLE nl_sink, nl_pk, nl_input;
DROP FUNCTION nl_send(), nl_rows(int, int), stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
