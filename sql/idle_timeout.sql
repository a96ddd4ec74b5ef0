--
-- idle_timeout (SPEC 3.1): while the source gives no records for that
-- long, the watermark advances as if a record with event time now() -
-- delay had arrived (to now() - 2 * delay), so the windows of a quiet
-- source still close.  Run with run_batch.
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set t idle:run
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_source('idle_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'k text, ts timestamptz');
\set VERBOSITY default
\set q 'SELECT streaming.window_start() AS ws, k, count(*) AS n FROM idle_src GROUP BY streaming.tumble(ts, ''5 minutes''), k'
SELECT streaming.create_stream('idle_quick', :'q', watermark => '10 minutes', idle_timeout => '1 millisecond', start => false);
SELECT streaming.create_stream('idle_slow', :'q', watermark => '10 minutes', idle_timeout => '1 hour', start => false);
-- bad arguments
SELECT streaming.create_stream('idle_bad', :'q', output_mode => 'update', idle_timeout => '1 minute', start => false);
SELECT streaming.create_stream('idle_bad', :'q', watermark => '10 minutes', idle_timeout => '0', start => false);
SELECT streaming.create_stream('idle_bad', :'q', watermark => '10 minutes', idle_timeout => '-1 second', start => false);

\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:00:00+00"}' '{"k": "b", "ts": "2024-01-01 10:01:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "idle$KAFKA_RUN_ID" -p 0
-- the data batch, then the no-data batch: the watermark (09:51) closes nothing
SELECT streaming.run_batch('idle_slow') AS data_batch, streaming.run_batch('idle_slow') AS no_data_batch,
       streaming.run_batch('idle_slow') AS nothing;
SELECT streaming.run_batch('idle_quick') AS data_batch, streaming.run_batch('idle_quick') AS no_data_batch;
SELECT count(*) AS rows FROM idle_quick;

-- once the source has been idle for 1 ms: the idle batch moves the
-- watermark, and the no-data batch it makes due writes the closed windows
-- (the wait is for the idle clock: until idle_timeout after it started)
SELECT count(pg_sleep_until(idle_clock_at + idle_timeout)) AS waited
FROM streaming.stream_defs WHERE name = 'idle_quick';
SELECT streaming.run_batch('idle_quick') IS NOT NULL AS idle_batch;
SELECT streaming.run_batch('idle_quick') AS no_data_batch;
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, k, n FROM idle_quick ORDER BY ws, k;
SELECT batch_id, num_input_rows, num_output_rows, max_event_time IS NULL AS no_events,
       CASE WHEN watermark < '2025-01-01' THEN to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI')
            WHEN watermark BETWEEN started_at - interval '21 minutes' AND started_at - interval '19 minutes' THEN 'now - 2 * delay'
            ELSE watermark::text END AS watermark
FROM streaming.progress WHERE stream = 'idle_quick' ORDER BY batch_id;
-- a source idle for less than idle_timeout holds the watermark
SELECT streaming.run_batch('idle_slow') AS nothing;
SELECT to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI') AS watermark FROM streaming.streams WHERE name = 'idle_slow';
-- a record of the closed windows is now late
\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:02:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "idle$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('idle_quick') IS NOT NULL AS ran;
SELECT num_input_rows, num_late_rows FROM streaming.progress WHERE stream = 'idle_quick' ORDER BY batch_id DESC LIMIT 1;

SELECT streaming.drop_stream(s, drop_sink => true) FROM unnest(ARRAY['idle_quick', 'idle_slow']) s;
SELECT streaming.drop_source('idle_src');
