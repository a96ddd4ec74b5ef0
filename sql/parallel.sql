--
-- parallel: create_stream's parallel_workers and alter_stream (issue 13):
-- the argument, what is refused, and that run_batch in a session reads its
-- batch itself (helpers serve a stream's worker only).
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set t pw_orders:run
\! printf '%s\n' '{"id": 1, "v": "a"}' '{"id": 2, "v": "b"}' 'not json' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "pw_orders$KAFKA_RUN_ID" -p 0
\! printf '%s\n' '{"id": 3, "v": "c"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "pw_orders$KAFKA_RUN_ID" -p 1
SELECT streaming.create_kafka_source('pw_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'id bigint, v text, ts timestamptz');
SELECT streaming.create_rate_source('pw_rate', 10);

-- the argument: 0 to 64, or NULL (the default): automatic, stored as NULL
SELECT streaming.create_stream('pw_bad', 'SELECT id FROM pw_src', parallel_workers => -1, start => false);
SELECT streaming.create_stream('pw_bad', 'SELECT id FROM pw_src', parallel_workers => 65, start => false);
SELECT streaming.create_stream('pw_bad', 'SELECT id FROM pw_src', parallel_workers => NULL, start => false);
SELECT parallel_workers IS NULL AS automatic FROM streaming.stream_defs WHERE name = 'pw_bad';
SELECT streaming.drop_stream('pw_bad');

-- a rate source's values are split over helpers too (the shapes helpers
-- run besides stateless queries and windows: parallel_shapes)
SELECT streaming.create_stream('pw_rates', 'SELECT value FROM pw_rate', parallel_workers => 2, start => false);
SELECT parallel_workers FROM streaming.stream_defs WHERE name = 'pw_rates';
SELECT streaming.drop_stream('pw_rates', drop_sink => true);

-- a stateless Kafka stream: stored, 0 by default
SELECT streaming.create_stream('pw_two', 'SELECT id, v FROM pw_src WHERE id > 1',
    parallel_workers => 2, start => false);
SELECT streaming.create_stream('pw_none', 'SELECT id FROM pw_src', start => false);
SELECT streaming.create_stream('pw_agg', 'SELECT v, count(*) AS n, sum(id) AS total FROM pw_src GROUP BY v',
    output_mode => 'complete', start => false);
SELECT streaming.create_stream('pw_sess',
    'SELECT streaming.window_start() AS ws, v, count(*) AS n FROM pw_src GROUP BY streaming.session(ts, ''1 minute''), v',
    output_mode => 'update', watermark => '1 minute', start => false);
SELECT name, parallel_workers FROM streaming.stream_defs WHERE name LIKE 'pw_%' ORDER BY name;

-- alter_stream: NULL leaves it, the same checks as create_stream
SELECT streaming.alter_stream('pw_two', parallel_workers => 3);
SELECT streaming.alter_stream('pw_two');
SELECT streaming.alter_stream('pw_none', parallel_workers => 1);
SELECT streaming.alter_stream('pw_none', parallel_workers => 0);
SELECT streaming.alter_stream('pw_agg', parallel_workers => 2);
SELECT streaming.alter_stream('pw_sess', parallel_workers => 0);
SELECT streaming.alter_stream('pw_sess', parallel_workers => 2);
SELECT streaming.alter_stream('pw_two', parallel_workers => -1);
SELECT streaming.alter_stream('pw_missing', parallel_workers => 1);
SELECT streaming.alter_stream(NULL, parallel_workers => 1);
-- reset: back to automatic (NULL), which NULL as a value cannot say; not
-- with a number for it too, nor for a setting it does not know
SELECT streaming.alter_stream('pw_none', reset => ARRAY['parallel_workers']);
SELECT parallel_workers IS NULL AS automatic FROM streaming.stream_defs WHERE name = 'pw_none';
SELECT streaming.alter_stream('pw_none', parallel_workers => 1, reset => ARRAY['parallel_workers']);
SELECT streaming.alter_stream('pw_none', reset => ARRAY['trigger']);
SELECT streaming.alter_stream('pw_none', reset => ARRAY[NULL]);
SELECT streaming.alter_stream('pw_none', parallel_workers => 0);
-- a second role cannot change another's helpers, nor the automatic cap
CREATE ROLE regress_pw_mallory;
SET ROLE regress_pw_mallory;
SELECT streaming.alter_stream('pw_two', parallel_workers => 0);
SELECT streaming.alter_stream('pw_two', reset => ARRAY['parallel_workers']);
UPDATE streaming.stream_defs SET parallel_workers = 64 WHERE name = 'pw_two';
SET streaming.max_parallel_workers_per_stream = 64;
RESET ROLE;
DROP ROLE regress_pw_mallory;
SELECT name, parallel_workers FROM streaming.stream_defs WHERE name LIKE 'pw_%' ORDER BY name;

-- run_batch (outside a transaction block) reads with helpers too: rows, bad
-- records and partial aggregates come back from them
SELECT streaming.run_batch('pw_two') IS NOT NULL AS ran;
SELECT id, v FROM pw_two ORDER BY id;
SELECT position->>'partition' AS partition, position->>'offset' AS offset, sqlstate
FROM streaming.dead_letters WHERE stream = 'pw_two';
SELECT streaming.run_batch('pw_agg') IS NOT NULL AS ran;
SELECT v, n, total FROM pw_agg ORDER BY v;
SELECT stream, num_input_rows, num_output_rows, num_bad_rows FROM streaming.progress
WHERE stream IN ('pw_two', 'pw_agg') ORDER BY stream;
-- inside a transaction block it reads the batch itself
\! printf '%s\n' '{"id": 4, "v": "a"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "pw_orders$KAFKA_RUN_ID" -p 0
BEGIN;
SELECT streaming.run_batch('pw_agg') IS NOT NULL AS ran;
COMMIT;
SELECT v, n, total FROM pw_agg ORDER BY v;
SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'streaming helper';

-- a file source is split by file: each helper reads whole files
\set dir `mktemp -d`
\setenv FS_DIR :dir
SET streaming.file_settle_time = '30min';
\! printf 'id,v\n1,a\n2,b\n' | test/put_file.sh a.csv '3 hours ago'
\! printf 'id,v\n3,c\nx,bad\n4,d\n' | test/put_file.sh b.csv '2 hours ago'
\! printf 'id,v\n5,e\n' | test/put_file.sh 'c%%0A.csv' '1 hour ago'
SELECT streaming.create_file_source('pw_files', :'dir', csv_header => true, pattern => '*.csv',
    columns => 'id int, v text');
SELECT streaming.create_stream('pw_file_rows', 'SELECT id, v, file_name, file_line FROM pw_files',
    parallel_workers => 2, start => false);
SELECT streaming.create_stream('pw_file_agg', 'SELECT count(*) AS n, sum(id) AS total FROM pw_files',
    output_mode => 'complete', parallel_workers => 2, start => false);
SELECT streaming.run_batch('pw_file_rows') IS NOT NULL AS ran;
SELECT streaming.run_batch('pw_file_agg') IS NOT NULL AS ran;
SELECT id, v, file_name, file_line FROM pw_file_rows ORDER BY id;
SELECT n, total FROM pw_file_agg;
SELECT stream, position, sqlstate FROM streaming.dead_letters
WHERE stream LIKE 'pw_file%' ORDER BY stream;
SELECT stream, num_input_rows, num_output_rows, num_bad_rows FROM streaming.progress
WHERE stream LIKE 'pw_file%' ORDER BY stream;
RESET streaming.file_settle_time;

SELECT streaming.drop_stream(s, drop_sink => true) FROM unnest(ARRAY['pw_two', 'pw_none', 'pw_agg', 'pw_sess']) s;
SELECT streaming.drop_stream(s, drop_sink => true) FROM unnest(ARRAY['pw_file_rows', 'pw_file_agg']) s;
SELECT streaming.drop_source('pw_files');
SELECT streaming.drop_source('pw_src');
SELECT streaming.drop_source('pw_rate');
