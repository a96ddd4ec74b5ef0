--
-- parallel_shapes: the shapes whose step after parsing the leader runs over
-- the rows its helpers parsed (issue 21): dedup_keys, session windows,
-- late_rows => 'keep', joins with tables; over a Kafka source, a file
-- source (dedup_keys: the first row of a key in file order) and a rate
-- source.  Each stream twice over one source, with parallel_workers => 2
-- (run_batch outside a transaction block reads with helpers, the leader a
-- share of its own) and => 0: the same sink rows, late rows, dead letters
-- and progress counts.
--
-- The rate source makes 10^9 values a second, so each batch after its
-- first (value 0, due at the start) takes the most a batch takes (100000
-- values), whenever it runs: the two streams' batches are the same values.
-- Its dedup keys are the timestamps, 1000 values to a microsecond, so the
-- shares' boundaries split keys and which value comes first matters.
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET ps.run = :'run';
\set t ps_rows:run
\set dir `mktemp -d`
\setenv FS_DIR :dir

-- the rows: k repeats every 1500 ids in the same partition (id % 4), with
-- other values, so which duplicate comes first matters; g groups every
-- fifth id, 3 s apart with a 5 minute gap every 200 ids (sessions); ids
-- above 4000 go back in time (late once the first batch moved the watermark)
CREATE TABLE ps_rows AS
SELECT g AS id, g % 1500 AS k, g % 5 AS g, 'v' || g AS v,
       CASE WHEN g <= 4000
            THEN timestamptz '2024-01-01 10:00:00+00' + g * interval '3 seconds' + (g / 200) * interval '5 minutes'
            WHEN g <= 4300
            THEN timestamptz '2024-01-01 10:00:00+00' + (g - 4000) * interval '3 seconds'
            ELSE timestamptz '2024-01-01 14:00:00+00' + (g - 4300) * interval '3 seconds' END AS ts
FROM generate_series(1, 4600) g;
CREATE FUNCTION ps_produce(lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    FOR p IN 0..3 LOOP
        EXECUTE format('COPY (SELECT row_to_json(r) FROM ps_rows r WHERE id BETWEEN %s AND %s AND id %% 4 = %s ORDER BY id) TO PROGRAM %L',
                       lo, hi, p, 'kcat -P -b "$KAFKA_BOOTSTRAP" -t ps_rows' || current_setting('ps.run') || ' -p ' || p);
    END LOOP;
END
$$;
SELECT ps_produce(1, 4000);
-- the same rows in CSV files, ids in file order (f1 before f2 ...), a key
-- in several files; one bad line
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 1 AND 700 ORDER BY id) TO PROGRAM 'test/put_file.sh f1.csv' WITH (FORMAT csv)
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 701 AND 1400 ORDER BY id) TO PROGRAM 'test/put_file.sh f2.csv' WITH (FORMAT csv)
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 1401 AND 1800 ORDER BY id) TO PROGRAM 'test/put_file.sh f3.csv' WITH (FORMAT csv)
\! printf '%s\n' 'not a number,1,1,x,2024-01-01 10:00:00+00' | test/put_file.sh f4.csv
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 1801 AND 2600 ORDER BY id) TO PROGRAM 'test/put_file.sh f5.csv' WITH (FORMAT csv)
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 2601 AND 3300 ORDER BY id) TO PROGRAM 'test/put_file.sh f6.csv' WITH (FORMAT csv)
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 3301 AND 4000 ORDER BY id) TO PROGRAM 'test/put_file.sh f7.csv' WITH (FORMAT csv)
SELECT streaming.create_file_source('ps_files', :'dir',
    columns => 'id bigint, k int, g int, v text, ts timestamptz', on_bad_record => 'dead_letter');
SELECT streaming.create_rate_source('ps_rate', 1000000000, num_partitions => 3);
\! printf '%s\n' 'not json' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ps_rows$KAFKA_RUN_ID" -p 1
SELECT streaming.create_kafka_source('ps_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', on_bad_record => 'dead_letter',
    columns => 'id bigint, k int, g int, v text, ts timestamptz');
CREATE TABLE ps_dim (g int PRIMARY KEY, name text);
INSERT INTO ps_dim SELECT g, 'group ' || g FROM generate_series(0, 3) g;

-- each shape as (name, query, further arguments), created twice
CREATE TABLE ps_shapes (name text, query text, args text);
INSERT INTO ps_shapes VALUES
  ('dedup', 'SELECT id, k, v FROM ps_src', $$dedup_keys => ARRAY['k']$$),
  ('dedup_wm', 'SELECT id, k, v, ts FROM ps_src',
   $$dedup_keys => ARRAY['k'], event_time => 'ts', watermark => '10 minutes', dedup_within_watermark => true, late_rows => 'keep'$$),
  ('session', 'SELECT streaming.window_start() AS ws, streaming.window_end() AS we, g, count(*) AS n, sum(id) AS total, min(v) AS first FROM ps_src WHERE id % 7 <> 0 GROUP BY streaming.session(ts, ''1 minute''), g',
   $$output_mode => 'update', watermark => '1 minute', late_rows => 'keep'$$),
  ('late', 'SELECT streaming.window_start() AS ws, g, count(*) AS n, sum(id) AS total FROM ps_src GROUP BY streaming.tumble(ts, ''5 minutes''), g',
   $$watermark => '1 minute', late_rows => 'keep'$$),
  ('join', 'SELECT s.id, s.v, d.name FROM ps_src s JOIN ps_dim d ON d.g = s.g WHERE s.id % 3 <> 0', ''),
  ('join_agg', 'SELECT d.name, count(*) AS n, sum(s.id) AS total FROM ps_src s LEFT JOIN ps_dim d ON d.g = s.g GROUP BY d.name',
   $$output_mode => 'complete'$$),
  ('join_dedup', 'SELECT s.id, s.k, d.name FROM ps_src s JOIN ps_dim d ON d.g = s.g', $$dedup_keys => ARRAY['k']$$),
  ('file_dedup', 'SELECT id, k, v FROM ps_files', $$dedup_keys => ARRAY['k']$$),
  ('file_dedup_wm', 'SELECT id, k, v, ts FROM ps_files',
   $$dedup_keys => ARRAY['k'], event_time => 'ts', watermark => '10 minutes', dedup_within_watermark => true, late_rows => 'keep'$$),
  ('file_join_dedup', 'SELECT s.id, s.k, d.name FROM ps_files s JOIN ps_dim d ON d.g = s.g WHERE s.id % 3 <> 0', $$dedup_keys => ARRAY['k']$$),
  ('rate', 'SELECT value, partition, value % 7 AS m FROM ps_rate WHERE value % 3 <> 0', ''),
  ('rate_agg', 'SELECT partition, value % 10 AS r, count(*) AS n, sum(value) AS total FROM ps_rate GROUP BY partition, value % 10',
   $$output_mode => 'complete'$$),
  ('rate_dedup', 'SELECT value, partition FROM ps_rate', $$dedup_keys => ARRAY['timestamp']$$);
SELECT format('SELECT streaming.create_stream(%L, %L, parallel_workers => %s, start => false%s)',
              'ps_' || name || '_' || w, query, w, CASE WHEN args <> '' THEN ', ' || args END)
FROM ps_shapes, (VALUES (0), (2)) ws(w) ORDER BY name, w \gexec
SELECT name, parallel_workers FROM streaming.stream_defs WHERE name LIKE 'ps\_%' ORDER BY name;

-- the same batches of each (every statement a transaction: helpers read them)
CREATE VIEW ps_streams AS SELECT 'ps_' || name || '_' || w AS stream, name, w
FROM ps_shapes, (VALUES (0), (2)) ws(w);
SELECT format('SELECT streaming.run_batch(%L) IS NOT NULL AS ran', stream) FROM ps_streams ORDER BY name, w \gexec
SELECT ps_produce(4001, 4600);
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 4001 AND 4300 ORDER BY id) TO PROGRAM 'test/put_file.sh f8.csv' WITH (FORMAT csv)
\copy (SELECT id, k, g, v, ts FROM ps_rows WHERE id BETWEEN 4301 AND 4600 ORDER BY id) TO PROGRAM 'test/put_file.sh f9.csv' WITH (FORMAT csv)
SELECT format('SELECT streaming.run_batch(%L) IS NOT NULL AS ran', stream) FROM ps_streams ORDER BY name, w \gexec
SELECT format('SELECT streaming.run_batch(%L) IS NOT NULL AS ran', stream) FROM ps_streams ORDER BY name, w \gexec

-- each shape: its sinks hold the same rows (EXCEPT ALL both ways), and
-- how many
CREATE FUNCTION ps_same(a text, b text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d1 bigint; d2 bigint; n bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM (TABLE %I EXCEPT ALL TABLE %I) d', a, b) INTO d1;
    EXECUTE format('SELECT count(*) FROM (TABLE %I EXCEPT ALL TABLE %I) d', b, a) INTO d2;
    EXECUTE format('SELECT count(*) FROM %I', a) INTO n;
    RETURN format('%s rows, %s differ', n, d1 + d2);
END $$;
SELECT name, ps_same('ps_' || name || '_0', 'ps_' || name || '_2') FROM ps_shapes ORDER BY name;
-- what dedup kept: the first row of each key (the lowest id, its partition's first)
SELECT count(*) AS keys, bool_and(id = k OR (k = 0 AND id = 1500)) AS first_kept FROM ps_dedup_2;
SELECT count(*) AS keys, bool_and(id = k OR (k = 0 AND id = 1500)) AS first_kept FROM ps_file_dedup_2;
-- the rate source's: the first value of each microsecond (0, then 1000 t - 999)
SELECT count(*) AS keys, bool_and(value = 0 OR value % 1000 = 1) AS first_kept FROM ps_rate_dedup_2;
-- the late rows kept, with their positions, and the bad record
SELECT name, (SELECT count(*) FROM streaming.late_rows l WHERE l.stream = 'ps_' || name || '_2') AS late,
       (SELECT count(*) FROM (SELECT position, event_time FROM streaming.late_rows WHERE stream = 'ps_' || name || '_0'
                              EXCEPT ALL
                              SELECT position, event_time FROM streaming.late_rows WHERE stream = 'ps_' || name || '_2') d)
     + (SELECT count(*) FROM (SELECT position, event_time FROM streaming.late_rows WHERE stream = 'ps_' || name || '_2'
                              EXCEPT ALL
                              SELECT position, event_time FROM streaming.late_rows WHERE stream = 'ps_' || name || '_0') d) AS differ,
       (SELECT string_agg(replace(position::text, :'dir', '$DIR'), ' ') FROM streaming.dead_letters WHERE stream = 'ps_' || name || '_2') AS bad,
       (SELECT count(*) FROM (SELECT position, raw, error FROM streaming.dead_letters WHERE stream = 'ps_' || name || '_0'
                              EXCEPT ALL
                              SELECT position, raw, error FROM streaming.dead_letters WHERE stream = 'ps_' || name || '_2') d)
     + (SELECT count(*) FROM (SELECT position, raw, error FROM streaming.dead_letters WHERE stream = 'ps_' || name || '_2'
                              EXCEPT ALL
                              SELECT position, raw, error FROM streaming.dead_letters WHERE stream = 'ps_' || name || '_0') d) AS bad_differ
FROM ps_shapes ORDER BY name;
-- the batches' counts, side by side; a window's num_late_rows counts its
-- late groups per partial aggregation (aggstate.c), so with helpers once
-- per share that had some (late_2); the late rows kept are the same
SELECT name, p0.batch_id, p0.num_input_rows AS input, p0.num_output_rows AS output,
       p0.num_bad_rows AS bad, p0.num_dedup_rows AS dups, p0.num_late_rows AS late,
       p2.num_late_rows AS late_2, p0.num_state_rows AS state,
       (p0.num_input_rows, p0.num_output_rows, p0.num_bad_rows, p0.num_dedup_rows,
        p0.num_state_rows, p0.watermark, p0.end_positions)
       IS NOT DISTINCT FROM
       (p2.num_input_rows, p2.num_output_rows, p2.num_bad_rows, p2.num_dedup_rows,
        p2.num_state_rows, p2.watermark, p2.end_positions) AS same
FROM ps_shapes
JOIN streaming.progress p0 ON p0.stream = 'ps_' || name || '_0'
LEFT JOIN streaming.progress p2 ON p2.stream = 'ps_' || name || '_2' AND p2.batch_id = p0.batch_id
ORDER BY name, p0.batch_id;

-- alter_stream gives a file dedup stream helpers too
SELECT streaming.create_stream('ps_file_alter', 'SELECT id, v FROM ps_files', dedup_keys => ARRAY['id'],
    start => false);
SELECT streaming.alter_stream('ps_file_alter', parallel_workers => 1);
SELECT parallel_workers FROM streaming.stream_defs WHERE name = 'ps_file_alter';

SELECT streaming.drop_stream(stream, drop_sink => true) FROM ps_streams;
SELECT streaming.drop_stream('ps_file_alter', drop_sink => true);
SELECT streaming.drop_source('ps_files');
SELECT streaming.drop_source('ps_rate');
\! rm -rf "$FS_DIR"
SELECT streaming.drop_source('ps_src');
DROP VIEW ps_streams;
DROP TABLE ps_shapes, ps_dim, ps_rows;
DROP FUNCTION ps_produce(int, int);
DROP FUNCTION ps_same(text, text);
