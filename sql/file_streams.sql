--
-- file_streams: what works on Kafka works on a file source (issue 9):
-- stateless and aggregate streams, windows and watermarks in every output
-- mode, dedup, late rows kept with their file and line, sink_function,
-- triggers once and available_now (available_now: the files there when it
-- starts) and process_available with a worker.  Aggregates are compared
-- with plain SQL over the same files loaded by COPY.
--
-- Files as in file_source: a fresh directory, test/put_file.sh.
--
\set dir `mktemp -d`
\setenv FS_DIR :dir
-- in this session (run_batch) a file is settled when 30 minutes old; the
-- workers use the server's setting: put_file.sh's files are an hour old
SET streaming.file_settle_time = '30min';

-- orders in three files, oldest first; b.csv repeats order 2 and has a
-- late row (09:00); c.csv moves the watermark past the first windows
\! printf 'id,status,amount,ts\n1,new,10,2024-01-01 10:00:00+00\n2,paid,20,2024-01-01 10:01:00+00\n3,new,30,2024-01-01 10:04:00+00\n4,paid,40,2024-01-01 10:06:00+00\n' | test/put_file.sh a.csv '3 hours ago'
\! printf 'id,status,amount,ts\n5,paid,50,2024-01-01 10:08:00+00\n2,paid,20,2024-01-01 10:01:00+00\n6,new,60,2024-01-01 10:12:00+00\n7,paid,70,2024-01-01 09:00:00+00\n' | test/put_file.sh b.csv '2 hours ago'
\! printf 'id,status,amount,ts\n8,new,80,2024-01-01 10:31:00+00\n9,paid,90,2024-01-01 10:32:00+00\n' | test/put_file.sh c.csv '1 hour ago'
SELECT streaming.create_file_source('fst_orders', :'dir', csv_header => true, pattern => '*.csv',
    columns => 'id int, status text, amount numeric(10,2), ts timestamptz', max_files_per_trigger => 1);
-- the same files through COPY, for the comparisons
CREATE TABLE fst_copy (id int, status text, amount numeric(10,2), ts timestamptz);
\set f :dir/a.csv
COPY fst_copy FROM :'f' (FORMAT csv, HEADER);
\set f :dir/b.csv
COPY fst_copy FROM :'f' (FORMAT csv, HEADER);
\set f :dir/c.csv
COPY fst_copy FROM :'f' (FORMAT csv, HEADER);

--
-- stateless, with the metadata columns
--
SELECT streaming.create_stream('fst_paid',
    $$SELECT id, amount, ts, file_name || ':' || file_line AS pos FROM fst_orders WHERE status = 'paid'$$,
    start => false);
SELECT streaming.run_batch('fst_paid'), streaming.run_batch('fst_paid'), streaming.run_batch('fst_paid'),
       streaming.run_batch('fst_paid');
SELECT * FROM fst_paid ORDER BY pos;
-- every paid row of the files, once
SELECT (SELECT count(*) FROM fst_paid) = (SELECT count(*) FROM fst_copy WHERE status = 'paid') AS same_count;

--
-- a window with a watermark, append mode: a window's row appears when the
-- watermark passes its end; the late row (09:00, its window closed) is kept
-- in streaming.late_rows with its file and line
--
SELECT streaming.create_stream('fst_append',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, status,
             count(*) AS n, sum(amount) AS total
      FROM fst_orders GROUP BY streaming.tumble(ts, '5 minutes'), status$$,
    output_mode => 'append', watermark => '10 minutes', late_rows => 'keep', start => false);
-- file by file, with the no-data batches a moved watermark makes due
SELECT streaming.run_batch('fst_append');
SELECT * FROM fst_append ORDER BY ws, status;
SELECT streaming.run_batch('fst_append');
SELECT * FROM fst_append ORDER BY ws, status;
SELECT streaming.run_batch('fst_append');
SELECT * FROM fst_append ORDER BY ws, status;
SELECT streaming.run_batch('fst_append');
SELECT streaming.run_batch('fst_append');
SELECT batch_id, num_input_rows, num_output_rows, num_late_rows, watermark, end_positions
FROM streaming.progress WHERE stream = 'fst_append' ORDER BY batch_id;
SELECT stream, position, event_time FROM streaming.late_rows ORDER BY id;
SELECT * FROM fst_append ORDER BY ws, status;
-- equal to plain GROUP BY over the windows the watermark closed, without the late row
SELECT count(*) AS differences FROM (
    (SELECT ws, we, status, n, total FROM fst_append
     EXCEPT ALL
     SELECT date_bin('5 minutes', ts, 'epoch'), date_bin('5 minutes', ts, 'epoch') + interval '5 minutes',
            status, count(*), sum(amount)
     FROM fst_copy WHERE id <> 7 GROUP BY 1, 2, 3
     HAVING date_bin('5 minutes', ts, 'epoch') + interval '5 minutes' <= '2024-01-01 10:22:00+00')
    UNION ALL
    (SELECT date_bin('5 minutes', ts, 'epoch'), date_bin('5 minutes', ts, 'epoch') + interval '5 minutes',
            status, count(*), sum(amount)
     FROM fst_copy WHERE id <> 7 GROUP BY 1, 2, 3
     HAVING date_bin('5 minutes', ts, 'epoch') + interval '5 minutes' <= '2024-01-01 10:22:00+00'
     EXCEPT ALL
     SELECT ws, we, status, n, total FROM fst_append)) d;

--
-- update and complete mode, and dedup (order 2 is in two files)
--
SELECT streaming.create_stream('fst_update',
    $$SELECT status, count(*) AS n, sum(amount) AS total FROM fst_orders GROUP BY status$$,
    output_mode => 'update', dedup_keys => ARRAY['id'], start => false);
SELECT streaming.create_stream('fst_complete',
    $$SELECT streaming.tumble(ts, '10 minutes') AS ws, count(*) AS n FROM fst_orders
      GROUP BY streaming.tumble(ts, '10 minutes')$$,
    output_mode => 'complete', start => false);
SELECT streaming.run_batch('fst_update'), streaming.run_batch('fst_complete');
SELECT * FROM fst_update ORDER BY status;
SELECT streaming.run_batch('fst_update'), streaming.run_batch('fst_complete');
SELECT streaming.run_batch('fst_update'), streaming.run_batch('fst_complete');
SELECT * FROM fst_update ORDER BY status;
SELECT * FROM fst_complete ORDER BY ws;
SELECT batch_id, num_input_rows, num_dedup_rows, num_state_rows FROM streaming.progress
WHERE stream = 'fst_update' ORDER BY batch_id;
-- equal to plain GROUP BY (the update stream without the repeated order)
SELECT count(*) AS differences FROM (
    (TABLE fst_update EXCEPT ALL
     SELECT status, count(*), sum(amount) FROM (SELECT DISTINCT * FROM fst_copy) o GROUP BY status)
    UNION ALL
    (SELECT status, count(*), sum(amount) FROM (SELECT DISTINCT * FROM fst_copy) o GROUP BY status
     EXCEPT ALL TABLE fst_update)) d;
SELECT count(*) AS differences FROM (
    (TABLE fst_complete EXCEPT ALL
     SELECT date_bin('10 minutes', ts, 'epoch'), count(*) FROM fst_copy GROUP BY 1)
    UNION ALL
    (SELECT date_bin('10 minutes', ts, 'epoch'), count(*) FROM fst_copy GROUP BY 1
     EXCEPT ALL TABLE fst_complete)) d;

--
-- sink_function (foreachBatch): each batch's rows, with its file names
--
CREATE TABLE fst_log (batch_id bigint, rows bigint, files text);
CREATE FUNCTION fst_merge(batch_id bigint, batch regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO fst_log SELECT %s, count(*), string_agg(DISTINCT file_name, %L) FROM %s',
                   batch_id, ',', batch);
END $$;
SELECT streaming.create_stream('fst_fn', 'SELECT id, file_name FROM fst_orders',
    sink_function => 'fst_merge(bigint, regclass)', start => false);
SELECT streaming.run_batch('fst_fn'), streaming.run_batch('fst_fn'), streaming.run_batch('fst_fn');
SELECT * FROM fst_log ORDER BY batch_id;

--
-- workers: trigger once (one batch: one file here), available_now (the
-- files there when it starts, in batches of one file, then finished),
-- process_available on a running stream
--
SELECT streaming.create_stream('fst_once', 'SELECT id, file_name FROM fst_orders', trigger => 'once');
SELECT streaming.process_available('fst_once', '60s');  -- until it has finished
SELECT status FROM streaming.streams WHERE name = 'fst_once';
SELECT file_name, count(*) FROM fst_once GROUP BY file_name ORDER BY file_name;
SELECT streaming.create_stream('fst_now', 'SELECT id, file_name FROM fst_orders', trigger => 'available_now');
SELECT streaming.process_available('fst_now', '60s');
SELECT status FROM streaming.streams WHERE name = 'fst_now';
SELECT file_name, count(*) FROM fst_now GROUP BY file_name ORDER BY file_name;
SELECT count(*) AS batches FROM streaming.progress WHERE stream = 'fst_now';
-- a file that comes later is read when the stream starts again
\! printf 'id,status,amount,ts\n10,new,100,2024-01-01 10:40:00+00\n' | test/put_file.sh d.csv '30 minutes ago'
SELECT streaming.start('fst_now');
SELECT streaming.process_available('fst_now', '60s');
SELECT status FROM streaming.streams WHERE name = 'fst_now';
SELECT file_name, count(*) FROM fst_now GROUP BY file_name ORDER BY file_name;
-- a running stream, and process_available
SELECT streaming.create_stream('fst_run', 'SELECT id, file_name FROM fst_orders');
SELECT streaming.process_available('fst_run');
SELECT file_name, count(*) FROM fst_run GROUP BY file_name ORDER BY file_name;
\! printf 'id,status,amount,ts\n11,new,110,2024-01-01 10:41:00+00\n' | test/put_file.sh e.csv '30 minutes ago'
SELECT streaming.process_available('fst_run');
SELECT file_name, count(*) FROM fst_run GROUP BY file_name ORDER BY file_name;
SELECT name, status, lag, last_error FROM streaming.streams WHERE name = 'fst_run';
SELECT streaming.stop('fst_run');

SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.stream_defs ORDER BY name;
SELECT streaming.drop_source('fst_orders');
DROP TABLE fst_copy, fst_log;
DROP FUNCTION fst_merge(bigint, regclass);
RESET streaming.file_settle_time;
\! rm -rf "$FS_DIR"
