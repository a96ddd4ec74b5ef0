--
-- watermarks: late data at and around the boundaries (SPEC 3.1), with a
-- delay of 0 so that the watermark is the largest event time seen.  The
-- comparisons are inclusive: a window is closed when its end <= watermark,
-- a session row is late when ts + gap <= watermark, a dedup row when its
-- event time <= watermark; a row older than the watermark still counts in
-- a window that is open.  Run with run_batch.
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set t wmb:run
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_source('wmb_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'k text, ts timestamptz');
\set VERBOSITY default
SELECT streaming.create_stream('wmb_tumble',
    $$SELECT streaming.window_start() AS ws, count(*) AS n FROM wmb_src GROUP BY streaming.tumble(ts, '10 minutes')$$,
    output_mode => 'update', watermark => '0 seconds', start => false);
SELECT streaming.create_stream('wmb_hop',
    $$SELECT streaming.window_start() AS ws, count(*) AS n FROM wmb_src GROUP BY streaming.hop(ts, '10 minutes', '5 minutes')$$,
    output_mode => 'update', watermark => '0 seconds', start => false);
SELECT streaming.create_stream('wmb_session',
    $$SELECT streaming.window_start() AS ws, streaming.window_end() AS we, k, count(*) AS n
      FROM wmb_src GROUP BY streaming.session(ts, '5 minutes'), k$$,
    output_mode => 'update', watermark => '0 seconds', start => false);
SELECT streaming.create_stream('wmb_dedup', 'SELECT k, ts FROM wmb_src', dedup_keys => ARRAY['k'],
    watermark => '0 seconds', event_time => 'ts', start => false);
CREATE FUNCTION wmb_run() RETURNS TABLE (stream text, batches int) LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    FOREACH stream IN ARRAY ARRAY['wmb_tumble', 'wmb_hop', 'wmb_session', 'wmb_dedup'] LOOP
        n := 0;
        WHILE streaming.run_batch(stream) IS NOT NULL LOOP
            n := n + 1;
        END LOOP;
        batches := n;
        RETURN NEXT;
    END LOOP;
END
$$;

-- batch 1: the watermark becomes 10:10:00
\! printf '%s\n' '{"k": "x", "ts": "2024-01-01 10:10:00+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "wmb$KAFKA_RUN_ID" -p 0
SELECT * FROM wmb_run();
SELECT name, to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS watermark FROM streaming.streams
WHERE name LIKE 'wmb\_%' ORDER BY name;

-- batch 2, against the watermark 10:10:00:
--   a 10:09:59.999999  tumble: [10:00, 10:10) closed (end = watermark): late
--                      hop: [10:00, 10:10) closed, late; [10:05, 10:15) open: counts
--                      session: 10:14:59.999999 > 10:10: counts; dedup: late
--   b 10:10:00         = watermark: tumble [10:10, 10:20) and hop [10:05, 10:15),
--                      [10:10, 10:20) open: counts; session counts; dedup: late
--   c 10:05:00         session: 10:05 + 5 minutes = watermark: late; dedup: late
--   d 10:10:00.000001  after the watermark: counts everywhere
\! printf '%s\n' '{"k": "a", "ts": "2024-01-01 10:09:59.999999+00"}' '{"k": "b", "ts": "2024-01-01 10:10:00+00"}' '{"k": "c", "ts": "2024-01-01 10:05:00+00"}' '{"k": "d", "ts": "2024-01-01 10:10:00.000001+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "wmb$KAFKA_RUN_ID" -p 0
SELECT * FROM wmb_run();
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, n FROM wmb_tumble ORDER BY ws;
SELECT to_char(ws AT TIME ZONE 'UTC', 'HH24:MI') AS ws, n FROM wmb_hop ORDER BY ws;
SELECT k, to_char(ws AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS ws, to_char(we AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS we, n
FROM wmb_session ORDER BY k, ws;
SELECT k, to_char(ts AT TIME ZONE 'UTC', 'HH24:MI:SS.US') AS ts FROM wmb_dedup ORDER BY k;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows
FROM streaming.progress WHERE stream LIKE 'wmb\_%' ORDER BY stream, batch_id;

SELECT streaming.drop_stream(s, drop_sink => true) FROM unnest(ARRAY['wmb_tumble', 'wmb_hop', 'wmb_session', 'wmb_dedup']) s;
SELECT streaming.drop_source('wmb_src');
DROP FUNCTION wmb_run();
