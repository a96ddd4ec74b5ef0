--
-- rate_source: streaming.create_rate_source (SPEC 2.3), read with run_batch
-- (streams created with start => false), and with workers for the
-- triggers and process_available.
--
-- Which values a batch takes depends on the clock, so nothing printed here
-- is a count of rows or an absolute time: timestamps are shown relative to
-- the stream's start time (streaming.stream_defs.source_started_at), and
-- every row and batch is checked against the schedule, computed here in
-- exact numeric arithmetic.  Waits are for a condition: the workers' progress
-- (process_available), or the clock by which the values fall due.
--
\set VERBOSITY terse

-- the stream's start time, recorded with its first batch
CREATE FUNCTION rs_start(stream text) RETURNS timestamptz LANGUAGE sql STABLE
RETURN (SELECT source_started_at FROM streaming.stream_defs WHERE name = stream);
-- microseconds from a to b
CREATE FUNCTION rs_us(a timestamptz, b timestamptz) RETURNS bigint LANGUAGE sql IMMUTABLE
RETURN ((extract(epoch FROM b) - extract(epoch FROM a)) * 1000000)::bigint;
-- is value v due t microseconds after the start: has the count of values
-- made by t, n(t), reached v?  With r rows per second, the rate growing
-- linearly from 0 to r over ramp microseconds: n(t) = r t^2 / (2 10^6 ramp)
-- during the ramp-up, r (2 t - ramp) / (2 10^6) after it.
CREATE FUNCTION rs_due(t bigint, v bigint, r bigint, ramp bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE
RETURN CASE WHEN t < 0 THEN false
            WHEN ramp > 0 AND t <= ramp THEN r::numeric * t * t >= 2000000::numeric * ramp * v
            ELSE r::numeric * (2 * t - ramp) >= 2000000::numeric * v END;
-- the next value after a batch's positions (the sum of their offsets)
CREATE FUNCTION rs_next(positions jsonb) RETURNS bigint LANGUAGE sql IMMUTABLE
RETURN (SELECT coalesce(sum(o.off::bigint), 0)
        FROM jsonb_each(positions) AS t(topic, parts), jsonb_each_text(t.parts) AS o(part, off));
-- run batches of a stream until cond (SQL over its sink) holds; in the
-- caller's transaction, like run_batch
CREATE FUNCTION rs_run_until(stream text, cond text) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    done boolean;
BEGIN
    LOOP
        EXECUTE format('SELECT %s FROM %I', cond, stream) INTO done;
        EXIT WHEN done;
        PERFORM streaming.run_batch(stream);
    END LOOP;
END $$;
-- wait until a given time has passed since the stream's start (its first
-- batch): a rate source's values fall due by the clock, so the clock is the
-- condition
CREATE FUNCTION rs_wait_since_start(stream text, since interval) RETURNS void
    LANGUAGE sql RETURN pg_sleep_until(rs_start(stream) + since);
-- a stream whose sink has value, partition and ts (the source's timestamp):
-- values 0 .. n-1 once each, in partition value % nparts, each at the first
-- microsecond at which it is due; batches consecutive, each taking every
-- value due at its start (unless capped at 100,000) and none after it;
-- stored offsets that count each partition's rows
CREATE FUNCTION rs_check(stream text, r bigint, nparts int, ramp interval DEFAULT '0')
RETURNS TABLE (values_ok boolean, partitions_ok boolean, timestamps_ok boolean,
               batches_ok boolean, offsets_ok boolean)
LANGUAGE plpgsql AS $$
DECLARE
    s timestamptz := rs_start(stream);
    ramp_us bigint := extract(epoch FROM ramp) * 1000000;
BEGIN
    EXECUTE format($q$
        SELECT count(*) > 0 AND count(*) = max(value) + 1 AND min(value) = 0
                   AND count(DISTINCT value) = count(*),
               count(*) FILTER (WHERE partition <> value %% $1) = 0,
               count(*) FILTER (WHERE NOT rs_due(rs_us($2, ts), value, $3, $4)
                                   OR rs_due(rs_us($2, ts) - 1, value, $3, $4)) = 0
        FROM %I$q$, stream)
        USING nparts, s, r, ramp_us
        INTO values_ok, partitions_ok, timestamps_ok;
    SELECT count(*) FILTER (WHERE NOT (
               (prev_end IS NULL OR rs_next(start_positions) = prev_end)
               AND (num_input_rows = 0 OR rs_due(rs_us(s, started_at), rs_next(end_positions) - 1, r, ramp_us))
               AND (num_input_rows = 100000 OR NOT rs_due(rs_us(s, started_at), rs_next(end_positions), r, ramp_us))
               AND num_input_rows = rs_next(end_positions) - rs_next(start_positions))) = 0
           AND min(batch_id) = 0
    INTO batches_ok
    FROM (SELECT *, lag(rs_next(end_positions)) OVER (ORDER BY batch_id) AS prev_end
          FROM streaming.progress WHERE progress.stream = rs_check.stream) b;
    EXECUTE format($q$
        SELECT count(*) = $1 AND count(*) FILTER (WHERE o.committed_offset IS DISTINCT FROM
                   (SELECT count(*) FROM %I k WHERE k.partition = o.partition)) = 0
        FROM streaming.source_lag o WHERE o.stream = $2$q$, stream)
        USING nparts, stream
        INTO offsets_ok;
    RETURN NEXT;
END $$;

--
-- arguments: each error names the argument and what is allowed, and
-- leaves nothing behind
--
CREATE VIEW rs_leftovers AS
SELECT (SELECT string_agg(name, ', ' ORDER BY name) FROM streaming.sources) AS sources,
       (SELECT string_agg(relname, ', ' ORDER BY relname) FROM pg_class
        WHERE relnamespace = 'public'::regnamespace AND relname LIKE 'bad%') AS relations;
\set VERBOSITY default
SELECT streaming.create_rate_source(NULL, 10);
SELECT streaming.create_rate_source('bad', NULL);
SELECT streaming.create_rate_source('bad', 10, num_partitions => NULL);
SELECT streaming.create_rate_source('bad', 10, ramp_up_time => NULL);
SELECT streaming.create_rate_source('bad', 0);
SELECT streaming.create_rate_source('bad', -5);
SELECT streaming.create_rate_source('bad', 1000000001);
SELECT streaming.create_rate_source('bad', 10, num_partitions => 0);
SELECT streaming.create_rate_source('bad', 10, num_partitions => -1);
SELECT streaming.create_rate_source('bad', 10, num_partitions => 1001);
SELECT streaming.create_rate_source('bad', 10, ramp_up_time => '-1 second');
SELECT streaming.create_rate_source('bad', 10, ramp_up_time => '1 day -25 hours');
-- the ramp-up's arithmetic is exact in 64 bits (128 for products): R T and
-- 2 10^6 T (T in microseconds) must fit
SELECT streaming.create_rate_source('bad', 10, ramp_up_time => '54 days');
SELECT streaming.create_rate_source('bad', 1000000000, ramp_up_time => '3 hours');
SELECT streaming.create_rate_source('bad', 10, ramp_up_time => '2000000000 days');
SELECT streaming.create_rate_source('bad', 10, ramp_up_time => 'soon');
SELECT streaming.create_rate_source('', 10);
SELECT streaming.create_rate_source(repeat('bad', 22), 10);
CREATE TABLE bad_taken (a int);
SELECT streaming.create_rate_source('bad_taken', 10);
DROP TABLE bad_taken;
\set VERBOSITY terse
SELECT * FROM rs_leftovers;
-- the largest values allowed; a name that is taken
SELECT streaming.create_rate_source('rs_max', 1000000000, num_partitions => 1000,
    ramp_up_time => '2 hours 33 minutes');
SELECT streaming.create_rate_source('rs_max', 10);
SELECT streaming.create_rate_source('rs_slow', 1, ramp_up_time => '53 days');
-- ramp_up_time is stored as hours:minutes:seconds (a month is 30 days)
SELECT streaming.create_rate_source('rs_month', 10, ramp_up_time => '1 mon 1.5 seconds');
SELECT name, kind, options FROM streaming.sources ORDER BY name;
SELECT streaming.drop_source('rs_max');
SELECT streaming.drop_source('rs_slow');
SELECT streaming.drop_source('rs_month');
SELECT * FROM rs_leftovers;

--
-- the view: timestamp, value, partition; selecting from it returns nothing
--
SELECT streaming.create_rate_source('rs_src', 1000, num_partitions => 3);
\d rs_src
SELECT count(*) FROM rs_src;

--
-- values, partitions, timestamps: 1000 rows per second in 3 partitions,
-- value v at the start + v milliseconds
--
SELECT streaming.create_stream('rs_all',
    'SELECT value, partition, "timestamp" AS ts FROM rs_src', start => false);
-- no start time before the first batch
SELECT rs_start('rs_all') IS NULL AS no_start;
-- the first batch records the start time, its own start, and takes value 0
SELECT streaming.run_batch('rs_all');
SELECT rs_start('rs_all') = started_at AS start_is_first_batch, num_input_rows
FROM streaming.progress WHERE stream = 'rs_all';
SELECT value, partition, ts - rs_start('rs_all') AS since_start FROM rs_all;
SELECT rs_run_until('rs_all', 'count(*) >= 100');
SELECT value, partition, ts - rs_start('rs_all') AS since_start FROM rs_all ORDER BY value LIMIT 5;
SELECT * FROM rs_check('rs_all', 1000, 3);
-- at 1000 rows per second, value v exactly v milliseconds after the start
SELECT count(*) FILTER (WHERE ts <> rs_start('rs_all') + value * interval '1 millisecond') AS off_schedule
FROM rs_all;
-- the start time never moves
SELECT rs_start('rs_all') = (SELECT started_at FROM streaming.progress
                             WHERE stream = 'rs_all' AND batch_id = 0) AS start_kept;
-- positions in Spark's shape, per partition the rows taken; no lag
SELECT start_positions, end_positions FROM streaming.progress WHERE stream = 'rs_all' AND batch_id = 0;
SELECT topic, partition, high_watermark = committed_offset AS caught_up, lag FROM streaming.source_lag
WHERE stream = 'rs_all' ORDER BY partition;
SELECT lag FROM streaming.streams WHERE name = 'rs_all';

-- a failing row names its position: {"partition": p, "value": v}
SELECT streaming.create_stream('rs_div', 'SELECT value, 10 / (value - 5) AS x FROM rs_src', start => false);
DO $$
DECLARE
    ctx text;
BEGIN
    PERFORM rs_run_until('rs_div', 'false');
EXCEPTION WHEN division_by_zero THEN
    GET STACKED DIAGNOSTICS ctx = PG_EXCEPTION_CONTEXT;
    RAISE NOTICE '%: %', SQLERRM, substring(ctx FROM 'stream "rs_div", source "rs_src" at [^\n]*');
END $$;

--
-- reset forgets the positions and the start time; the stream then starts
-- over at value 0, on the same schedule from its new start
--
SELECT max(value) AS old_max FROM rs_all \gset
SELECT rs_start('rs_all') AS old_start \gset
SELECT streaming.reset('rs_all');
SELECT rs_start('rs_all') IS NULL AS start_forgotten,
       (SELECT count(*) FROM streaming.positions p JOIN streaming.stream_defs d ON d.id = p.stream_id
        WHERE d.name = 'rs_all') AS positions;
SELECT rs_run_until('rs_all', format('count(*) FILTER (WHERE ts >= %L) >= 100', now()));
SELECT rs_start('rs_all') > :'old_start' AS new_start;
WITH old AS (SELECT value, partition, ts - :'old_start' AS since FROM rs_all WHERE ts < rs_start('rs_all')),
     new AS (SELECT value, partition, ts - rs_start('rs_all') AS since FROM rs_all WHERE ts >= rs_start('rs_all')),
     upto AS (SELECT least((SELECT max(value) FROM old), (SELECT max(value) FROM new)) AS m)
SELECT (SELECT count(*) FROM (SELECT * FROM old, upto WHERE value <= m EXCEPT ALL SELECT * FROM new, upto WHERE value <= m) d) AS only_old,
       (SELECT count(*) FROM (SELECT * FROM new, upto WHERE value <= m EXCEPT ALL SELECT * FROM old, upto WHERE value <= m) d) AS only_new,
       (SELECT m >= 99 FROM upto) AS compared;

--
-- ramp_up_time: the rate grows linearly from 0 to 1000 rows per second
-- over 200 ms; n(t) = 1000 t^2 / 0.4 s values by t <= 200 ms, so value v
-- at 20 sqrt(v) ms (rounded up to the microsecond), 100 values by 200 ms,
-- then one per millisecond
--
SELECT streaming.create_rate_source('rs_ramp_src', 1000, num_partitions => 2,
    ramp_up_time => '200 milliseconds');
SELECT streaming.create_stream('rs_ramp',
    'SELECT value, partition, "timestamp" AS ts FROM rs_ramp_src', start => false);
SELECT rs_run_until('rs_ramp', 'count(*) > 220');
SELECT value, partition, ts - rs_start('rs_ramp') AS since_start FROM rs_ramp ORDER BY value LIMIT 6;
SELECT * FROM rs_check('rs_ramp', 1000, 2, '200 milliseconds');
SELECT count(*) FILTER (WHERE ts <= rs_start('rs_ramp') + interval '100 milliseconds') AS by_100ms,
       count(*) FILTER (WHERE ts <= rs_start('rs_ramp') + interval '200 milliseconds') AS by_200ms,
       count(*) FILTER (WHERE ts <= rs_start('rs_ramp') + interval '220 milliseconds') AS by_220ms
FROM rs_ramp;
SELECT value, ts - rs_start('rs_ramp') AS since_start FROM rs_ramp WHERE value IN (100, 101, 150) ORDER BY value;

--
-- a batch takes at most 100,000 values: at 10^9 rows per second the stream
-- can only fall behind, and its lag shows by how much
--
SELECT streaming.create_rate_source('rs_fast_src', 1000000000, num_partitions => 4);
SELECT streaming.create_stream('rs_fast',
    $$SELECT partition, count(*) AS n, min(value) AS lo, max(value) AS hi, max("timestamp") AS last_ts
      FROM rs_fast_src GROUP BY partition$$, output_mode => 'update', start => false);
SELECT streaming.run_batch('rs_fast') FROM generate_series(1, 4);
SELECT batch_id, num_input_rows, start_positions, end_positions FROM streaming.progress
WHERE stream = 'rs_fast' ORDER BY batch_id;
-- 300,001 values; value v at v / 1000 microseconds, rounded up
SELECT partition, n, lo, hi, last_ts - rs_start('rs_fast') AS since_start FROM rs_fast ORDER BY partition;
SELECT lag > 0 AS behind FROM streaming.streams WHERE name = 'rs_fast';
SELECT partition, committed_offset, high_watermark > committed_offset AS behind
FROM streaming.source_lag WHERE stream = 'rs_fast' ORDER BY partition;

-- one that fell behind catches up in several batches: 100,000 rows per
-- second, 1.5 s after its first batch
SELECT streaming.create_rate_source('rs_catch_src', 100000, num_partitions => 2);
SELECT streaming.create_stream('rs_catch',
    $$SELECT partition, count(*) AS n FROM rs_catch_src GROUP BY partition$$,
    output_mode => 'update', start => false);
SELECT streaming.run_batch('rs_catch');
SELECT rs_wait_since_start('rs_catch', '1.5 seconds');
DO $$
BEGIN
    LOOP
        PERFORM streaming.run_batch('rs_catch');
        EXIT WHEN (SELECT lag FROM streaming.streams WHERE name = 'rs_catch') = 0;
    END LOOP;
END $$;
SELECT count(*) FILTER (WHERE num_input_rows = 100000) >= 1 AS capped_batches,
       (array_agg(num_input_rows ORDER BY batch_id DESC))[1] < 100000 AS last_not_capped,
       sum(num_input_rows) = (SELECT sum(n) FROM rs_catch) AS all_counted
FROM streaming.progress WHERE stream = 'rs_catch';

--
-- a windowed aggregate in append mode: 20 ms windows per partition, closed
-- by a watermark 10 ms behind; equal to GROUP BY over the schedule (the
-- windows that the watermark before the last batch closed)
--
SELECT streaming.create_rate_source('rs_win_src', 1000, num_partitions => 2);
SELECT streaming.create_stream('rs_win',
    $$SELECT streaming.window_start() AS ws, partition, count(*) AS n, min(value) AS lo, max(value) AS hi
      FROM rs_win_src GROUP BY streaming.tumble("timestamp", '20 milliseconds'), partition$$,
    output_mode => 'append', watermark => '10 milliseconds', start => false);
SELECT rs_run_until('rs_win', 'count(*) >= 10');
CREATE VIEW rs_win_expected AS
SELECT date_bin('20 milliseconds', rs_start('rs_win') + v * interval '1 millisecond', 'epoch') AS ws,
       (v % 2)::int AS partition, count(*) AS n, min(v) AS lo, max(v) AS hi
FROM generate_series(0, (SELECT sum(committed_offset) - 1 FROM streaming.source_lag WHERE stream = 'rs_win')) v
GROUP BY 1, 2
HAVING date_bin('20 milliseconds', rs_start('rs_win') + v * interval '1 millisecond', 'epoch')
       + interval '20 milliseconds' <= (SELECT watermark FROM streaming.progress WHERE stream = 'rs_win'
                                        ORDER BY batch_id DESC OFFSET 1 LIMIT 1);
SELECT (SELECT count(*) FROM (TABLE rs_win EXCEPT ALL TABLE rs_win_expected) d) AS only_sink,
       (SELECT count(*) FROM (TABLE rs_win_expected EXCEPT ALL TABLE rs_win) d) AS only_expected;
-- the watermark: the last value's timestamp - 10 ms
SELECT watermark = rs_start('rs_win') + ((SELECT sum(committed_offset) - 1 FROM streaming.source_lag
                                          WHERE stream = 'rs_win') * interval '1 millisecond')
                   - interval '10 milliseconds' AS watermark_ok
FROM streaming.streams WHERE name = 'rs_win';

--
-- complete mode through a sink function: every batch hands the whole
-- result, the rows per partition so far
--
CREATE TABLE rs_collected (batch_id bigint, partition int, n bigint);
CREATE FUNCTION rs_collect(batch_id bigint, batch regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO rs_collected SELECT $1, partition, n FROM %s', batch) USING batch_id;
END $$;
SELECT streaming.create_stream('rs_complete',
    $$SELECT partition, count(*) AS n FROM rs_src GROUP BY partition$$,
    output_mode => 'complete', sink_function => 'rs_collect(bigint, regclass)', start => false);
SELECT streaming.run_batch('rs_complete');
DO $$
BEGIN
    WHILE (SELECT sum(n) FROM rs_collected WHERE batch_id = (SELECT max(batch_id) FROM rs_collected)) < 50 LOOP
        PERFORM streaming.run_batch('rs_complete');
    END LOOP;
END $$;
SELECT count(*) = 3 AS all_partitions,
       count(*) FILTER (WHERE c.n IS DISTINCT FROM l.committed_offset) AS wrong_counts
FROM rs_collected c
JOIN streaming.source_lag l ON l.stream = 'rs_complete' AND l.partition = c.partition
WHERE c.batch_id = (SELECT max(batch_id) FROM rs_collected);

--
-- dedup: the first row of each partition, the later ones counted as duplicates
--
SELECT streaming.create_stream('rs_dedup', 'SELECT value, partition FROM rs_src',
    dedup_keys => ARRAY['partition'], start => false);
SELECT rs_run_until('rs_dedup',
    $$count(*) = 3 AND (SELECT sum(committed_offset) >= 50 FROM streaming.source_lag WHERE stream = 'rs_dedup')$$);
SELECT * FROM rs_dedup ORDER BY value;
SELECT sum(num_dedup_rows) = sum(num_input_rows) - 3 AS duplicates_counted
FROM streaming.progress WHERE stream = 'rs_dedup';

-- late rows: at 3 * 10^8 rows per second 300 values share a microsecond, and
-- the 100,000-value batches end inside one: value 100,000 and the next 200
-- are at 334 us; with a watermark of delay 0 those 200, in the next batch,
-- are not after it, so dedup drops them as late and keeps them with their
-- positions
SELECT streaming.create_rate_source('rs_late_src', 300000000, num_partitions => 3);
SELECT streaming.create_stream('rs_late', 'SELECT value FROM rs_late_src',
    dedup_keys => ARRAY['value'], watermark => '0 seconds', event_time => 'timestamp',
    late_rows => 'keep', start => false);
SELECT streaming.run_batch('rs_late') FROM generate_series(1, 3);
SELECT batch_id, num_input_rows, num_late_rows, watermark - rs_start('rs_late') AS watermark
FROM streaming.progress WHERE stream = 'rs_late' ORDER BY batch_id;
SELECT count(*), min((position->>'value')::bigint), max((position->>'value')::bigint),
       count(*) FILTER (WHERE (position->>'partition')::int <> (position->>'value')::bigint % 3) AS wrong_partition,
       count(*) FILTER (WHERE event_time <> rs_start('rs_late') + interval '334 microseconds') AS wrong_time
FROM streaming.late_rows WHERE stream = 'rs_late';
SELECT count(*), count(*) FILTER (WHERE value BETWEEN 100001 AND 100200) AS late_in_sink FROM rs_late;

--
-- triggers, with a worker: 'once' runs one batch (at the start: value 0);
-- 'available_now' takes every value due when the worker starts, then
-- finishes (process_available waits for such a stream to finish); with
-- another trigger process_available waits for every value due when it is
-- called
--
SELECT streaming.create_stream('rs_once', 'SELECT value, partition, "timestamp" AS ts FROM rs_src',
    trigger => 'once');
SELECT streaming.process_available('rs_once', '60s');
SELECT status FROM streaming.streams WHERE name = 'rs_once';
SELECT value, partition, ts - rs_start('rs_once') AS since_start FROM rs_once;

SELECT streaming.create_stream('rs_now', 'SELECT value, partition, "timestamp" AS ts FROM rs_src',
    trigger => 'available_now', start => false);
SELECT streaming.run_batch('rs_now');
SELECT rs_wait_since_start('rs_now', '50 milliseconds');
SELECT streaming.start('rs_now');
SELECT streaming.process_available('rs_now', '60s');
SELECT status FROM streaming.streams WHERE name = 'rs_now';
SELECT * FROM rs_check('rs_now', 1000, 3);
-- everything due when the worker's first batch started, and no more
SELECT rs_due(rs_us(rs_start('rs_now'), b.started_at), max(value), 1000, 0) AS last_was_due,
       NOT rs_due(rs_us(rs_start('rs_now'), b.started_at), max(value) + 1, 1000, 0) AS next_was_not,
       max(value) >= 50 AS values_after_the_first_batch
FROM rs_now, streaming.progress b WHERE b.stream = 'rs_now' AND b.batch_id = 1
GROUP BY b.started_at;

SELECT streaming.create_stream('rs_pa', 'SELECT value, partition, "timestamp" AS ts FROM rs_src',
    trigger => '10 milliseconds');
-- called once the worker has run for 50 ms (its first batch is the start)
SELECT streaming.process_available('rs_pa', '60s');
SELECT rs_wait_since_start('rs_pa', '50 milliseconds');
SELECT clock_timestamp() AS called \gset
SELECT streaming.process_available('rs_pa', '60s');
SELECT streaming.stop('rs_pa');
SELECT NOT rs_due(rs_us(rs_start('rs_pa'), :'called'), max(value) + 1, 1000, 0) AS all_due_processed,
       max(value) >= 50 AS values_after_the_first_batch
FROM rs_pa;
SELECT * FROM rs_check('rs_pa', 1000, 3);

-- clean up
SELECT count(*) AS dropped_streams
FROM (SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.stream_defs) d;
SELECT count(*) AS dropped_sources FROM (SELECT streaming.drop_source(name) FROM streaming.sources) d;
DROP VIEW rs_leftovers, rs_win_expected;
DROP TABLE rs_collected;
DROP FUNCTION rs_collect, rs_check, rs_wait_since_start, rs_run_until, rs_next, rs_due, rs_us, rs_start;
SELECT count(*) FROM streaming.sources;
SELECT count(*) FROM streaming.positions;
