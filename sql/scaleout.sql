--
-- scaleout: past one server (SPEC 8) on one server: sources with a share of
-- the partitions (share => 'i/n'), changed with alter_kafka_source while the
-- streams are stopped (positions kept), a share moved between two streams of
-- the same definition with export_share / import_share, and the partial
-- states that another server reads (streaming.partial_states).  The
-- combine view over several servers is test/t/021_scaleout.pl's.
--
-- Environment as kafka_source: KAFKA_BOOTSTRAP, KAFKA_RUN_ID; topics are
-- created by the first record produced to them with 4 partitions.
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set VERBOSITY terse
SET stm.run = :'run';
\i test/regress_helpers.sql
-- so_produce(topic, partition, lo, hi): {"k": k, "v": v} for v in lo..hi, k = v % 3
CREATE FUNCTION so_produce(topic text, p int, lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (SELECT json_build_object(''k'', ''k'' || v %% 3, ''v'', v) FROM generate_series(%s, %s) v) TO PROGRAM %L',
                   lo, hi, 'kcat -P -b "$KAFKA_BOOTSTRAP" -t ' || topic || current_setting('stm.run') || ' -p ' || p);
END $$;
CREATE VIEW so_progress AS
SELECT stream, batch_id, num_input_rows, stm_strip(end_positions::text) AS end_positions
FROM streaming.progress;
SELECT so_produce('so_orders', p, p * 100, p * 100 + 9) FROM generate_series(0, 3) p;

--
-- bad shares
--
\set t so_orders:run
SELECT stm_error(format($$SELECT streaming.create_kafka_source('so_bad', %L, topics => ARRAY[%L], share => %L)$$, :'bs', :'t', s))
FROM unnest(ARRAY['1', '2/2', 'a/2', '0/0', '0,0/2', '0/', '/2', '-1/2', '0/2/4']) s;
SELECT stm_error(format($$SELECT streaming.create_kafka_source('so_bad', %L, partitions => %L, share => '0/2')$$,
                        :'bs', json_build_object(:'t', ARRAY[0, 1])));
SELECT count(*) FROM streaming.sources WHERE name = 'so_bad';

--
-- two sources of the same topic: shares 0/2 and 1/2 (stored normalised), and
-- one of the whole topic; the same aggregate stream over each
--
SELECT streaming.create_kafka_source('so_a', :'bs', topics => ARRAY[:'t'], starting_offsets => 'earliest',
    columns => 'k text, v int', share => ' 0 / 2');
SELECT streaming.create_kafka_source('so_b', :'bs', topics => ARRAY[:'t'], starting_offsets => 'earliest',
    columns => 'k text, v int', share => '1/2');
SELECT streaming.create_kafka_source('so_all', :'bs', topics => ARRAY[:'t'], starting_offsets => 'earliest',
    columns => 'k text, v int');
SELECT name, options ->> 'share' AS share FROM streaming.sources WHERE name LIKE 'so\_%' ORDER BY name;
SELECT streaming.create_stream(s || '_st',
    format('SELECT k, count(*) AS n, sum(v) AS total, avg(v) AS mean, min(v) AS lo, max(v) AS hi FROM %s GROUP BY k', s),
    output_mode => 'update', start => false)
FROM unnest(ARRAY['so_a', 'so_b', 'so_all']) s;
SELECT streaming.run_batch(s || '_st') IS NOT NULL AS ran FROM unnest(ARRAY['so_a', 'so_b', 'so_all']) s;
SELECT * FROM so_progress WHERE stream LIKE 'so\_%' ORDER BY stream, batch_id;
-- the shares together are the whole topic
CREATE VIEW so_combined AS
SELECT k, sum(n) AS n, sum(total) AS total, round(sum(total)::numeric / sum(n), 6) AS mean, min(lo) AS lo, max(hi) AS hi
FROM (SELECT * FROM so_a_st UNION ALL SELECT * FROM so_b_st) u GROUP BY k;
CREATE VIEW so_diff AS
(SELECT * FROM so_combined EXCEPT ALL SELECT k, n, total, round(mean, 6), lo, hi FROM so_all_st)
UNION ALL
(SELECT k, n, total, round(mean, 6), lo, hi FROM so_all_st EXCEPT ALL SELECT * FROM so_combined);
SELECT * FROM so_combined ORDER BY k;
SELECT count(*) AS differences FROM so_diff;

--
-- the partial states another server reads: the state table and its layout
--
SELECT stream, state_table ~ '^state_[0-9]+$' AS is_state_table,
       jsonb_path_query_array(layout, '$.aggregates[*].aggregate') AS aggregates,
       jsonb_path_query_array(layout, '$.aggregates[*].state_type') AS state_types,
       jsonb_path_query_array(layout, '$.outputs[*].expression') AS outputs
FROM streaming.partial_states WHERE stream = 'so_a_st';
-- combined with the aggregates' own functions (streaming.combine_partial),
-- the two shares' states give what the whole topic's stream has
CREATE FUNCTION so_combine(a text, b text) RETURNS TABLE (k text, n bigint, total bigint, mean numeric, lo int, hi int)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format(
        $q$SELECT key_1,
                  streaming.combine_partial('pg_catalog.count()', '{}', state_1, server, NULL::bigint),
                  streaming.combine_partial('pg_catalog.sum(integer)', '{integer}', state_2, server, NULL::bigint),
                  round(streaming.combine_partial('pg_catalog.avg(integer)', '{integer}', state_3, server, NULL::numeric), 6),
                  streaming.combine_partial('pg_catalog.min(integer)', '{integer}', state_4, server, NULL::integer),
                  streaming.combine_partial('pg_catalog.max(integer)', '{integer}', state_5, server, NULL::integer)
           FROM (SELECT 'a' AS server, * FROM streaming.%I UNION ALL SELECT 'b', * FROM streaming.%I) u
           GROUP BY key_1$q$,
        (SELECT state_table FROM streaming.partial_states WHERE stream = a),
        (SELECT state_table FROM streaming.partial_states WHERE stream = b));
END $$;
SELECT * FROM so_combine('so_a_st', 'so_b_st') ORDER BY k;
SELECT count(*) AS differences FROM
    ((SELECT * FROM so_combine('so_a_st', 'so_b_st') EXCEPT ALL SELECT k, n, total, round(mean, 6), lo, hi FROM so_all_st)
     UNION ALL
     (SELECT k, n, total, round(mean, 6), lo, hi FROM so_all_st EXCEPT ALL SELECT * FROM so_combine('so_a_st', 'so_b_st'))) d;
-- a state that is not the aggregate's: an error naming where it came from
SELECT stm_error($$SELECT streaming.combine_partial('pg_catalog.avg(integer)', '{integer}', '\x01'::bytea, 'server_x', NULL::numeric)$$);
SELECT stm_error($$SELECT streaming.combine_partial('pg_catalog.avg(integer)', '{bigint}', '\x01'::bytea, 'server_x', NULL::numeric)$$);
SELECT stm_error($$SELECT streaming.combine_partial('pg_catalog.now()', '{}', 1, 'server_x', NULL::numeric)$$);

--
-- alter_kafka_source: refused while a stream of the source runs; while they
-- are stopped, the share changes and every position is kept
--
SELECT streaming.start('so_a_st');
SELECT stm_error($$SELECT streaming.alter_kafka_source('so_a', share => '0/4')$$);
SELECT streaming.stop('so_a_st');
SELECT stm_error($$SELECT streaming.alter_kafka_source('so_all', share => 'x')$$);
-- so_a gives partition 2 up (0/4: partition 0), so_b takes it (1,2,3/4)
SELECT streaming.alter_kafka_source('so_a', share => '0/4');
SELECT streaming.stop('so_b_st');
SELECT streaming.alter_kafka_source('so_b', share => '3,1,2/4');
SELECT name, options ->> 'share' AS share FROM streaming.sources WHERE name IN ('so_a', 'so_b') ORDER BY name;
SELECT stm_strip(part) AS part, part_no, position FROM streaming.positions
WHERE stream_id = (SELECT id FROM streaming.stream_defs WHERE name = 'so_a_st') ORDER BY part_no;
-- new records in every partition: so_a reads partition 0 only now
SELECT so_produce('so_orders', p, p * 100 + 10, p * 100 + 14) FROM generate_series(0, 3) p;
SELECT streaming.run_batch('so_a_st') IS NOT NULL AS ran;
-- so_b has no position in partition 2: import_share must give it one first
SELECT stm_error($$SELECT streaming.export_share('so_a_st', share => '0/4')$$);
SELECT stm_error($$SELECT streaming.export_share('so_a_st', share => '1/4')$$);
SELECT stm_error($$SELECT streaming.import_share('so_b_st', '{"format": "nothing"}')$$);
CREATE TABLE so_moved AS SELECT streaming.export_share('so_a_st', share => '2/4') AS data;
SELECT stm_strip(jsonb_path_query_array(data, '$.positions[*].part')::text) AS parts,
       jsonb_path_query_array(data, '$.positions[*].part_no') AS part_nos,
       jsonb_path_query_array(data, '$.positions[*].position') AS positions,
       data -> 'state' AS state FROM so_moved;
-- taken away from so_a in the same transaction
SELECT part_no, position FROM streaming.positions
WHERE stream_id = (SELECT id FROM streaming.stream_defs WHERE name = 'so_a_st') ORDER BY part_no;
-- so_a cannot import what it gave away (its share does not hold it)
SELECT stm_error($$SELECT streaming.import_share('so_a_st', (SELECT data FROM so_moved))$$);
SELECT streaming.import_share('so_b_st', (SELECT data FROM so_moved));
-- twice: refused, it has a position there now
SELECT stm_error($$SELECT streaming.import_share('so_b_st', (SELECT data FROM so_moved))$$);
SELECT streaming.run_batch('so_b_st') IS NOT NULL AS ran;
SELECT streaming.run_batch('so_all_st') IS NOT NULL AS ran;
SELECT * FROM so_progress WHERE stream LIKE 'so\_%' ORDER BY stream, batch_id;
-- no record lost or read twice
SELECT count(*) AS differences FROM so_diff;
SELECT sum(n) AS records FROM so_combined;

--
-- moving a whole stream: its positions, watermark and partial states; the
-- stream it came from is 'moved' and cannot run; the importing one combines
-- the states into its own groups and brings its sink up to date
--
SELECT streaming.alter_kafka_source('so_b', share => '0/1');
CREATE TABLE so_whole AS SELECT streaming.export_share('so_a_st') AS data;
SELECT jsonb_array_length(data -> 'positions') AS positions, jsonb_array_length(data -> 'state') AS groups FROM so_whole;
SELECT status FROM streaming.streams WHERE name = 'so_a_st';
SELECT count(*) AS state_rows FROM streaming.partial_states p WHERE stream = 'so_a_st';
SELECT stm_error($$SELECT streaming.run_batch('so_a_st')$$);
SELECT stm_error($$SELECT streaming.start('so_a_st')$$);
SELECT stm_error($$SELECT streaming.export_share('so_a_st')$$);
SELECT streaming.import_share('so_b_st', (SELECT data FROM so_whole));
-- so_b alone now equals the whole topic's stream
SELECT so_produce('so_orders', p, p * 100 + 15, p * 100 + 16) FROM generate_series(0, 3) p;
SELECT streaming.run_batch('so_b_st') IS NOT NULL AS ran;
SELECT streaming.run_batch('so_all_st') IS NOT NULL AS ran;
SELECT count(*) AS differences FROM
    ((SELECT k, n, total, round(mean, 6), lo, hi FROM so_b_st EXCEPT ALL SELECT k, n, total, round(mean, 6), lo, hi FROM so_all_st)
     UNION ALL
     (SELECT k, n, total, round(mean, 6), lo, hi FROM so_all_st EXCEPT ALL SELECT k, n, total, round(mean, 6), lo, hi FROM so_b_st)) d;
SELECT sum(n) AS records FROM so_b_st;
-- a share of another stream definition is refused
SELECT streaming.create_stream('so_other_st', 'SELECT k, count(*) AS n FROM so_all GROUP BY k',
    output_mode => 'update', start => false);
SELECT split_part(stm_error($$SELECT streaming.import_share('so_other_st', (SELECT data FROM so_whole))$$), E'\n', 1) AS error;

--
-- a share on a topic pattern: partitions of topics created later are in it
--
SELECT streaming.create_kafka_source('so_pat', :'bs', topic_pattern => 'so_pat_[0-9]' || :'run',
    starting_offsets => 'earliest', columns => 'k text, v int', share => '1/2');
SELECT so_produce('so_pat_1', p, p * 10, p * 10) FROM generate_series(0, 3) p;
SELECT streaming.create_stream('so_pat_st', 'SELECT kafka_topic AS topic, kafka_partition AS p, v FROM so_pat', start => false);
SELECT streaming.run_batch('so_pat_st') IS NOT NULL AS ran;
SELECT so_produce('so_pat_2', p, 100 + p * 10, 100 + p * 10) FROM generate_series(0, 3) p;
SELECT streaming.run_batch('so_pat_st') IS NOT NULL AS ran;
SELECT stm_strip(topic) AS topic, p, v FROM so_pat_st ORDER BY topic, p;

--
-- a hostile role: no other role's partial states, layouts, shares
--
SELECT 'streaming.' || state_table AS so_state FROM streaming.partial_states WHERE stream = 'so_b_st' \gset
CREATE ROLE so_mallory LOGIN;
GRANT CREATE ON SCHEMA public TO so_mallory;
SET ROLE so_mallory;
SELECT count(*) AS visible FROM streaming.partial_states;
SELECT stm_error(format('SELECT * FROM %s', :'so_state')) ~ '^42501: permission denied' AS refused;
SELECT count(*) FROM streaming.partial_state_layout(substr(:'so_state', 17)::int);
SELECT stm_error($$SELECT streaming.export_share('so_b_st')$$);
SELECT stm_error($$SELECT streaming.import_share('so_b_st', '{"format": "streaming share", "version": 1, "positions": []}')$$);
SELECT stm_error($$SELECT streaming.alter_kafka_source('so_b', share => '0/2')$$);
RESET ROLE;

DROP VIEW so_diff, so_combined, so_progress;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT name FROM streaming.streams WHERE name LIKE 'so\_%' LOOP
        PERFORM streaming.drop_stream(r.name, drop_sink => true);
    END LOOP;
    FOR r IN SELECT name FROM streaming.sources WHERE name LIKE 'so\_%' LOOP
        PERFORM streaming.drop_source(r.name);
    END LOOP;
END $$;
DROP TABLE so_moved, so_whole;
DROP FUNCTION so_combine(text, text), so_produce(text, int, int, int);
REVOKE CREATE ON SCHEMA public FROM so_mallory;
DROP ROLE so_mallory;
DROP FUNCTION stm_error(text), stm_strip(text);
DROP FUNCTION stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
