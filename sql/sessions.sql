--
-- sessions: session windows in every output mode (SPEC 3, 3.1, 3.2) and
-- watermarks on aggregates without a window, run with run_batch.  Each
-- sink is checked against sessions computed in SQL (gaps and islands) and
-- against scenarios worked out by hand.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment: records
-- are produced with COPY ... TO PROGRAM kcat), KAFKA_RUN_ID (optional topic
-- suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET ses.topic = :'bs';
\set t ses:run
SELECT set_config('ses.topic', :'t', false);

-- every record is also kept here, to compute what the sinks must hold
CREATE TABLE ses_input (id serial, k text, v int, ts timestamptz, sent boolean DEFAULT false);
CREATE FUNCTION ses_send() RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (SELECT json_build_object(''k'', k, ''v'', v, ''ts'', ts) FROM ses_input WHERE NOT sent ORDER BY id) TO PROGRAM %L',
                   'kcat -P -b "$KAFKA_BOOTSTRAP" -t ' || current_setting('ses.topic') || ' -p 0');
    UPDATE ses_input SET sent = true WHERE NOT sent;
END
$$;
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_source('ses_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'k text, v int, ts timestamptz');
\set VERBOSITY default

-- sessions per key: a row more than the gap after the previous one starts a new session
CREATE VIEW ses_expected AS
WITH marked AS (
    SELECT k, v, ts,
           CASE WHEN ts <= lag(ts) OVER w + interval '5 minutes' THEN 0 ELSE 1 END AS starts
    FROM ses_input WHERE sent WINDOW w AS (PARTITION BY k ORDER BY ts)),
numbered AS (
    SELECT k, v, ts, sum(starts) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session
    FROM marked)
SELECT min(ts) AS ws, max(ts) + interval '5 minutes' AS we, k, count(*) AS n, sum(v) AS total
FROM numbered GROUP BY k, session;

CREATE FUNCTION ses_run_all() RETURNS TABLE (stream text, batches int) LANGUAGE plpgsql AS $$
DECLARE
    n int;
BEGIN
    FOREACH stream IN ARRAY ARRAY['ses_complete', 'ses_update', 'ses_append', 'ses_update_wm', 'ses_all', 'ses_by_time', 'ses_by_status']
    LOOP
        n := 0;
        WHILE streaming.run_batch(stream) IS NOT NULL LOOP
            n := n + 1;
        END LOOP;
        batches := n;
        RETURN NEXT;
    END LOOP;
END
$$;

\set q 'SELECT streaming.window_start() AS ws, streaming.window_end() AS we, k, count(*) AS n, sum(v) AS total FROM ses_src GROUP BY streaming.session(ts, ''5 minutes''), k'
SELECT streaming.create_stream('ses_complete', :'q', output_mode => 'complete', start => false);
SELECT streaming.create_stream('ses_update', :'q', output_mode => 'update', start => false);
SELECT streaming.create_stream('ses_append', :'q', output_mode => 'append', watermark => '5 minutes',
    late_rows => 'keep', start => false);
SELECT streaming.create_stream('ses_update_wm', :'q', output_mode => 'update', watermark => '5 minutes', start => false);
-- one session over all rows when there is no other group column
SELECT streaming.create_stream('ses_all',
    $$SELECT streaming.session(ts, '5 minutes') AS ws, streaming.window_end() AS we, count(*) AS n
      FROM ses_src GROUP BY streaming.session(ts, '5 minutes')$$,
    output_mode => 'complete', start => false);
-- without a window: grouped by the event time itself, a group closes when the watermark passes it
SELECT streaming.create_stream('ses_by_time', 'SELECT ts, count(*) AS n, sum(v) AS total FROM ses_src GROUP BY ts',
    output_mode => 'append', watermark => '5 minutes', event_time => 'ts', start => false);
-- ... and grouped by something else, the watermark moves but nothing closes or is late
SELECT streaming.create_stream('ses_by_status', 'SELECT k, count(*) AS n FROM ses_src GROUP BY k',
    output_mode => 'update', watermark => '5 minutes', event_time => 'ts', start => false);
\d ses_update
\d ses_by_time

-- batch 1: a's rows at 10:00 and 10:03 overlap ([10:00, 10:05) and
-- [10:03, 10:08)): one session [10:00, 10:08); 10:20 starts another
INSERT INTO ses_input (k, v, ts) VALUES
    ('a', 1, '2024-01-01 10:00:00+00'), ('a', 2, '2024-01-01 10:03:00+00'),
    ('b', 10, '2024-01-01 10:01:00+00'), ('a', 4, '2024-01-01 10:20:00+00');
SELECT ses_send();
SELECT * FROM ses_run_all();
SELECT 'complete' AS sink, * FROM ses_complete UNION ALL SELECT 'update', * FROM ses_update
UNION ALL SELECT 'append', * FROM ses_append ORDER BY 1, 4, 2;

-- batch 2: b at 10:06 touches [10:01, 10:06): they merge (the append
-- stream's watermark 10:15 has closed b's session: late there); a at 10:12
-- starts a session between a's two; a at 10:02 is late for the append stream
INSERT INTO ses_input (k, v, ts) VALUES
    ('b', 20, '2024-01-01 10:06:00+00'), ('a', 8, '2024-01-01 10:12:00+00'), ('a', 16, '2024-01-01 10:02:00+00');
SELECT ses_send();
SELECT * FROM ses_run_all();
SELECT 'complete' AS sink, * FROM ses_complete UNION ALL SELECT 'update', * FROM ses_update
UNION ALL SELECT 'append', * FROM ses_append ORDER BY 1, 4, 2;

-- batch 3: a at 10:16 reaches both [10:12, 10:17) and [10:20, 10:25): the
-- three become [10:12, 10:25); update mode deletes the sink row of the
-- session that started at 10:20.  b at 09:58 moves the start of b's
-- session: its row at 10:01 goes
INSERT INTO ses_input (k, v, ts) VALUES ('a', 32, '2024-01-01 10:16:00+00'), ('b', 40, '2024-01-01 09:58:00+00');
SELECT ses_send();
SELECT * FROM ses_run_all();
SELECT 'complete' AS sink, * FROM ses_complete UNION ALL SELECT 'update', * FROM ses_update
UNION ALL SELECT 'append', * FROM ses_append ORDER BY 1, 4, 2;
SELECT * FROM ses_all ORDER BY ws;

-- batch 4: a row far later closes every session for the watermark streams
INSERT INTO ses_input (k, v, ts) VALUES ('c', 64, '2024-01-01 11:00:00+00');
SELECT ses_send();
SELECT * FROM ses_run_all();

-- complete and update (no watermark) equal the sessions computed in SQL
SELECT (SELECT count(*) FROM (SELECT * FROM ses_expected EXCEPT SELECT * FROM ses_complete) d) AS missing_from_complete,
       (SELECT count(*) FROM (SELECT * FROM ses_complete EXCEPT SELECT * FROM ses_expected) d) AS extra_in_complete,
       (SELECT count(*) FROM (SELECT * FROM ses_expected EXCEPT SELECT * FROM ses_update) d) AS missing_from_update,
       (SELECT count(*) FROM (SELECT * FROM ses_update EXCEPT SELECT * FROM ses_expected) d) AS extra_in_update,
       (SELECT count(*) FROM ses_expected) AS sessions;
-- append: each closed session once; the late rows (a 10:02, b 10:06, b 09:58) are not in them
SELECT * FROM ses_append ORDER BY k, ws;
SELECT k, to_char(event_time AT TIME ZONE 'UTC', 'HH24:MI') AS event_time, position->'offset' AS "offset"
FROM streaming.late_rows JOIN ses_input ON position->>'offset' = (ses_input.id - 1)::text
WHERE stream = 'ses_append' ORDER BY late_rows.id;
-- update with a watermark: the same rows dropped, closed sessions evicted
SELECT * FROM ses_update_wm ORDER BY k, ws;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows,
       to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI') AS watermark
FROM streaming.progress WHERE stream IN ('ses_append', 'ses_update_wm') ORDER BY stream, batch_id;
SELECT * FROM ses_by_time ORDER BY ts;
SELECT * FROM ses_by_status ORDER BY k;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows,
       to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI') AS watermark
FROM streaming.progress WHERE stream IN ('ses_by_time', 'ses_by_status') ORDER BY stream, batch_id;

SELECT streaming.drop_stream(s, drop_sink => true)
FROM unnest(ARRAY['ses_complete', 'ses_update', 'ses_append', 'ses_update_wm', 'ses_all', 'ses_by_time', 'ses_by_status']) s;
SELECT count(*) AS state_tables_left FROM pg_tables WHERE schemaname = 'streaming' AND tablename LIKE 'state\_%';
SELECT streaming.drop_source('ses_src');
DROP VIEW ses_expected;
DROP FUNCTION ses_run_all(), ses_send();
DROP TABLE ses_input;
