--
-- stream_joins: joins of two sources (SPEC 3.6), run with run_batch.  The
-- cases are Spark's own (StreamingJoinSuite.scala: StreamingInnerJoinSuite,
-- StreamingOuterJoinSuite, StreamingFullOuterJoinSuite,
-- StreamingLeftSemiJoinSuite), with the same input in the same batch
-- splits and the same rows expected per step, then cases of ours.
--
-- Spark's setupStream: key = value, time = value seconds, leftValue =
-- value * 2, rightValue = value * 3, watermark 10 seconds.  Here each case
-- has a left and a right source (<case>_l, <case>_r: columns k int, t
-- timestamptz) and sj_add(source, v, ...) produces rows of key v at v
-- seconds after the epoch, sj_addp(source, k, t, ...) rows of key k at t
-- seconds.  Spark's 10-second windows joined by equality are
-- streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10
-- seconds'), and window.end is date_bin(...) + 10 seconds, in seconds.
--
-- A Spark step "AddData ...; CheckNewAnswer(rows)" is sj_step(stream): run
-- every due batch (run_batch until it returns NULL: the data batch, then
-- the no-data batch when the watermark moved), then the sink's rows not
-- seen before, sorted, NULLs empty: (1,10,2,) is Spark's Row(1, 10, 2,
-- null).  MultiAddData is both sides produced before one step.
-- assertNumStateRows(total, updated) is sj_state(stream): per side, the
-- state table's rows now and, summed over the step's batches, Spark's
-- numRowsUpdated, numRowsRemoved, numRowsDroppedByWatermark and the NULL
-- rows given (progress.state_operators).
--
-- Where our rows or state differ from Spark's, a comment says so: SPEC 3.6
-- is the contract.  The difference that recurs: a stored row is evicted in
-- the first batch whose watermark W makes every row that could still
-- match it late (its bound <= W, rows at or below W being late), which is
-- one instant earlier than Spark's state watermark for <= conditions
-- (Spark keeps a row whose bound = W, which can match nothing more).  The
-- rows given are the same; the state counts then differ.
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix).
--
\i test/regress_helpers.sql
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SELECT set_config('sj.bs', :'bs', false) IS NOT NULL AS bs, set_config('sj.run', :'run', false) IS NOT NULL AS run;
SET stm.run = :'run';
CREATE TABLE sj_made (source text);

-- sj_source(name, columns): a Kafka source on topic <name><run>, from the
-- earliest offset (its WARNING that the topic does not exist yet is left
-- out: it would name the run's suffix)
CREATE FUNCTION sj_source(src text, cols text DEFAULT 'k int, t timestamptz') RETURNS void
LANGUAGE plpgsql SET client_min_messages = error AS $$
BEGIN
    INSERT INTO sj_made VALUES (src);
    PERFORM streaming.create_kafka_source(src, current_setting('sj.bs'),
        topics => ARRAY[src || current_setting('sj.run')], starting_offsets => 'earliest', columns => cols);
END $$;
CREATE FUNCTION sj_sources(c text, cols text DEFAULT 'k int, t timestamptz') RETURNS void
LANGUAGE sql BEGIN ATOMIC SELECT sj_source(c || '_l', cols); SELECT sj_source(c || '_r', cols); END;
-- sj_send(source, query): the query's rows (JSON values) to partition 0 of
-- the source's topic, in order
CREATE FUNCTION sj_send(src text, query text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (%s) TO PROGRAM %L', query,
                   format('kcat -P -b %s -t %s -p 0', current_setting('sj.bs'), src || current_setting('sj.run')));
END $$;
-- sj_addp(source, k1, t1, k2, t2, ...): rows of key k at t seconds
CREATE FUNCTION sj_addp(src text, VARIADIC v int[]) RETURNS void LANGUAGE sql BEGIN ATOMIC
SELECT sj_send(src, format($q$SELECT json_build_object('k', (%1$L::int[])[i], 't', to_timestamp((%1$L::int[])[i + 1]))
                              FROM generate_series(1, %2$s, 2) i ORDER BY i$q$, v, cardinality(v)));
END;
-- sj_add(source, v, ...): rows of key v at v seconds
CREATE FUNCTION sj_add(src text, VARIADIC v int[]) RETURNS void LANGUAGE sql BEGIN ATOMIC
SELECT sj_send(src, format($q$SELECT json_build_object('k', x, 't', to_timestamp(x))
                              FROM unnest(%L::int[]) WITH ORDINALITY u(x, i) ORDER BY i$q$, v));
END;

CREATE TABLE sj_seen (stream text, r text);
CREATE TABLE sj_from (stream text PRIMARY KEY, from_batch bigint);
-- sj_step(stream): every due batch, then the sink's rows not seen before
CREATE FUNCTION sj_step(s text, OUT batches int, OUT new_rows text) LANGUAGE plpgsql AS $$
DECLARE
    sink text := (SELECT d.sink::text FROM streaming.stream_defs d WHERE d.name = s);
BEGIN
    INSERT INTO sj_from SELECT s, coalesce(last_batch_id, -1) FROM streaming.streams WHERE name = s
    ON CONFLICT (stream) DO UPDATE SET from_batch = excluded.from_batch;
    batches := 0;
    WHILE streaming.run_batch(s) IS NOT NULL LOOP
        batches := batches + 1;
    END LOOP;
    EXECUTE format('SELECT coalesce(string_agg(r, '' '' ORDER BY r), '''') FROM
                    (SELECT x::text FROM %s x EXCEPT ALL SELECT r FROM sj_seen WHERE stream = %L) d(r)', sink, s)
        INTO new_rows;
    EXECUTE format('INSERT INTO sj_seen SELECT %L, x::text FROM %s x
                    EXCEPT ALL SELECT stream, r FROM sj_seen WHERE stream = %L', s, sink, s);
END $$;
-- sj_steps(stream, ...): sj_step of each stream, in turn
CREATE FUNCTION sj_steps(VARIADIC s text[]) RETURNS TABLE (stream text, batches int, new_rows text)
LANGUAGE plpgsql AS $$
BEGIN
    FOREACH stream IN ARRAY s LOOP
        SELECT * FROM sj_step(stream) INTO batches, new_rows;
        RETURN NEXT;
    END LOOP;
END $$;
-- sj_state(stream): per side (alias), the state table's rows now (Spark's
-- numRowsTotal of the last batch, checked against the table itself) and
-- the last step's numRowsUpdated, numRowsRemoved,
-- numRowsDroppedByWatermark and numNullRows
CREATE FUNCTION sj_state(s text) RETURNS TABLE (side text, total bigint, total_ok boolean, updated bigint,
                                                removed bigint, late bigint, null_rows bigint)
LANGUAGE plpgsql AS $$
DECLARE
    id int := (SELECT d.id FROM streaming.stream_defs d WHERE d.name = s);
    tab text;
BEGIN
    FOR side, total, updated, removed, late, null_rows, tab IN
        SELECT o.key, (array_agg((o.value->>'numRowsTotal')::bigint ORDER BY p.batch_id DESC))[1],
               sum((o.value->>'numRowsUpdated')::bigint), sum((o.value->>'numRowsRemoved')::bigint),
               sum((o.value->>'numRowsDroppedByWatermark')::bigint), sum((o.value->>'numNullRows')::bigint),
               format('streaming.join_%s_%s', id, o.value->>'side')
        FROM streaming.progress p, jsonb_each(p.state_operators) o
        WHERE p.stream = s AND p.batch_id > (SELECT from_batch FROM sj_from WHERE stream = s)
        GROUP BY o.key, o.value->>'side' ORDER BY o.value->>'side'
    LOOP
        EXECUTE format('SELECT count(*) = %s FROM %s', total, tab) INTO total_ok;
        RETURN NEXT;
    END LOOP;
END $$;
-- the watermarks of most cases: 10 seconds on both sides
\set wm10 '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}'
\set wm5 '{"a": {"event_time": "t", "delay": "5 seconds"}, "b": {"event_time": "t", "delay": "5 seconds"}}'

--
-- StreamingInnerJoinSuite
--

-- "stream stream inner join on non-time column": no watermark, no time
-- condition; the WARNINGs say that both sides' state grows without bound
-- (Spark warns in its log).  StopStream/StartStream between steps: a
-- run_batch stream has no worker to stop; restarts are test/t/021.
SELECT sj_sources('ntc');
SELECT streaming.create_stream('ntc', $$SELECT l.k, l.k * 2 AS lv, r.k * 3 AS rv FROM ntc_l l JOIN ntc_r r USING (k)$$,
    start => false);
SELECT sj_add('ntc_l', 1);
SELECT * FROM sj_step('ntc');                               -- ()
SELECT sj_add('ntc_r', 1, 10);
SELECT * FROM sj_step('ntc');                               -- (1, 2, 3)
SELECT sj_add('ntc_l', 10);
SELECT * FROM sj_step('ntc');                               -- (10, 20, 30)
SELECT sj_add('ntc_r', 1);
SELECT * FROM sj_step('ntc');                               -- (1, 2, 3)
SELECT sj_add('ntc_l', 1);
SELECT * FROM sj_step('ntc');                               -- (1, 2, 3), (1, 2, 3)
SELECT sj_add('ntc_l', 100), sj_add('ntc_r', 100);
SELECT * FROM sj_step('ntc');                               -- (100, 200, 300)
SELECT * FROM sj_state('ntc');

-- "stream stream inner join on windows - without watermark"
SELECT sj_sources('wnw');
SELECT streaming.create_stream('wnw',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, r.k * 3 AS rv
      FROM wnw_l l JOIN wnw_r r ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')$$,
    start => false);
SELECT sj_add('wnw_l', 1);
SELECT * FROM sj_step('wnw');                               -- ()
SELECT sj_add('wnw_r', 1);
SELECT * FROM sj_step('wnw');                               -- (1, 10, 2, 3)
SELECT sj_add('wnw_l', 25);
SELECT * FROM sj_step('wnw');                               -- ()
SELECT sj_add('wnw_r', 25);
SELECT * FROM sj_step('wnw');                               -- (25, 30, 50, 75)
SELECT sj_add('wnw_l', 1);
SELECT * FROM sj_step('wnw');                               -- (1, 10, 2, 3): no watermark, state for 1 kept
SELECT sj_add('wnw_l', 5);
SELECT * FROM sj_step('wnw');                               -- ()
SELECT sj_add('wnw_r', 5);
SELECT * FROM sj_step('wnw');                               -- (5, 10, 10, 15)
SELECT watermark FROM streaming.streams WHERE name = 'wnw'; -- NULL: no watermark

-- "stream stream inner join on windows - with watermark": the watermark
-- on the left only; the stream's watermark is the left's (the policy is
-- over the sides that have one), and the window equality bounds both
-- sides, the right's window column being its event time.  Difference: a
-- right row at or below the watermark is late (SPEC 3.6: either side)
-- and counted, where Spark, which has no watermark on the right, joins it
-- with the state and does not store it; the rows given are the same.
SELECT sj_sources('ww');
SELECT streaming.create_stream('ww',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, r.k * 3 AS rv
      FROM ww_l l JOIN ww_r r ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')$$,
    watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}}', start => false);
SELECT sj_add('ww_l', 1);
SELECT * FROM sj_step('ww');                                -- ()
SELECT * FROM sj_state('ww');                               -- total 1, updated 1
SELECT sj_add('ww_r', 1);
SELECT * FROM sj_step('ww');                                -- (1, 10, 2, 3)
SELECT * FROM sj_state('ww');                               -- total 2, updated 1
SELECT sj_add('ww_l', 25);
SELECT * FROM sj_step('ww');                                -- (): watermark 15, the no-data batch evicts window [0, 10)
SELECT * FROM sj_state('ww');                               -- total 1, updated 1
SELECT watermark FROM streaming.streams WHERE name = 'ww';
SELECT sj_add('ww_r', 25);
SELECT * FROM sj_step('ww');                                -- (25, 30, 50, 75)
SELECT * FROM sj_state('ww');                               -- total 2, updated 1
SELECT sj_add('ww_r', 1);
SELECT * FROM sj_step('ww');                                -- (): not joined, not stored
SELECT * FROM sj_state('ww');                               -- total 2, updated 0 (ours: dropped 1)
SELECT sj_add('ww_l', 5);
SELECT * FROM sj_step('ww');                                -- (): late
SELECT * FROM sj_state('ww');                               -- total 2, updated 0, dropped by watermark 1
-- ours: after a reset, the batches count the state's rows from the table
-- again (they count on from what the last batch stored otherwise)
SELECT streaming.reset('ww');
SELECT batches > 0 AS ran FROM sj_step('ww');
SELECT side, total, total_ok FROM sj_state('ww');
SELECT sj_add('ww_l', 26);
SELECT batches > 0 AS ran FROM sj_step('ww');
SELECT side, total, total_ok FROM sj_state('ww');

-- "stream stream inner join with time range - with watermark - one side
-- condition": leftTime < rightTime - 5 s bounds the right side only (a
-- right row meets left rows up to its time - 5 s); the left's state grows
-- without bound (WARNING), as in Spark.
SELECT sj_sources('tr1');
SELECT streaming.create_stream('tr1',
    $$SELECT l.k, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM tr1_l l JOIN tr1_r r ON l.k = r.k AND l.t < r.t - interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('tr1_l', 1, 5);
SELECT * FROM sj_step('tr1');                               -- ()
SELECT sj_addp('tr1_r', 1, 11);
SELECT * FROM sj_step('tr1');                               -- (1, 5, 11)
SELECT sj_addp('tr1_r', 1, 10);
SELECT * FROM sj_step('tr1');                               -- (): 5 is not < 10 - 5
SELECT * FROM sj_state('tr1');                              -- total 3
SELECT sj_addp('tr1_l', 1, 3, 1, 30);
SELECT * FROM sj_step('tr1');                               -- (1, 3, 10), (1, 3, 11)
SELECT * FROM sj_state('tr1');                              -- total 5
SELECT sj_addp('tr1_r', 0, 30);
SELECT * FROM sj_step('tr1');                               -- (): watermark 20, right rows <= 25 evicted: (1, 10), (1, 11)
SELECT * FROM sj_state('tr1');                              -- total 4
-- (1, 20) late; (1, 21) matches (1, 3) and (1, 5) and is not stored (21 - 5 <= 20); (1, 28) stored
SELECT sj_addp('tr1_r', 1, 20, 1, 21, 1, 28);
SELECT * FROM sj_step('tr1');                               -- (1, 3, 21), (1, 5, 21), (1, 3, 28), (1, 5, 28)
SELECT * FROM sj_state('tr1');                              -- total 5, updated 1, dropped 1
SELECT sj_addp('tr1_l', 1, 20, 1, 21);
SELECT * FROM sj_step('tr1');                               -- (1, 21, 28)
SELECT * FROM sj_state('tr1');                              -- total 6, updated 1, dropped 1

-- "stream stream inner join with time range - with watermark - two side
-- conditions": left delay 20 s, right 30 s; leftTime BETWEEN rightTime -
-- 10 s AND rightTime + 5 s.  A left row meets right rows up to its time +
-- 10 s, a right row left rows up to its time + 5 s.
SELECT sj_sources('tr2');
SELECT streaming.create_stream('tr2',
    $$SELECT l.k, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM tr2_l l JOIN tr2_r r
        ON l.k = r.k AND l.t BETWEEN r.t - interval '10 seconds' AND r.t + interval '5 seconds'$$,
    watermarks => '{"l": {"event_time": "t", "delay": "20 seconds"}, "r": {"event_time": "t", "delay": "30 seconds"}}',
    start => false);
SELECT sj_addp('tr2_l', 1, 20);
SELECT * FROM sj_step('tr2');                               -- ()
SELECT sj_addp('tr2_r', 1, 14, 1, 15, 1, 25, 1, 26, 1, 30, 1, 31);
SELECT * FROM sj_step('tr2');                               -- (1, 20, 15), (1, 20, 25), (1, 20, 26), (1, 20, 30)
SELECT * FROM sj_state('tr2');                              -- total 7, updated 7
SELECT sj_addp('tr2_r', 1, 60);
SELECT * FROM sj_step('tr2');                               -- ()
SELECT sj_addp('tr2_l', 1, 49, 1, 50, 1, 65, 1, 66);
SELECT * FROM sj_step('tr2');                               -- (1, 50, 60), (1, 65, 60)
-- watermark min(66 - 20, 60 - 30) = 30: right rows with time + 5 <= 30
-- go, 14, 15 and 25 (Spark: 14 and 15, total 10; 25 can only meet left
-- rows at or before 30, which are late); left rows with time + 10 <= 30
-- go: 20 (Spark keeps it)
SELECT * FROM sj_state('tr2');                              -- Spark: total 10
SELECT sj_addp('tr2_l', 1, 30, 1, 31);
SELECT * FROM sj_step('tr2');                               -- (1, 31, 26), (1, 31, 30), (1, 31, 31): 30 is late
SELECT * FROM sj_state('tr2');                              -- Spark: total 11, updated 1, dropped 1
SELECT sj_addp('tr2_r', 1, 80);
SELECT * FROM sj_step('tr2');                               -- (): watermark min(46, 50) = 46
SELECT * FROM sj_state('tr2');                              -- Spark: total 6
SELECT sj_addp('tr2_r', 1, 46, 1, 50);
SELECT * FROM sj_step('tr2');                               -- (1, 49, 50), (1, 50, 50): 46 is late
SELECT * FROM sj_state('tr2');                              -- Spark: total 7, updated 1, dropped 1

-- "stream stream inner join without equality predicate": refused
SELECT stm_error($$SELECT streaming.create_stream('noeq', 'SELECT l.k, r.k AS rk FROM ntc_l l JOIN ntc_r r ON l.k < r.k', start => false)$$);

-- "stream stream self join": one source under two aliases, read once per
-- batch; the key is an expression
SELECT sj_source('self_s');
SELECT streaming.create_stream('self',
    $$SELECT a.k % 5 AS key, a.k AS lv, b.k AS rv FROM self_s a JOIN self_s b ON a.k % 5 = b.k % 5$$, start => false);
SELECT sj_add('self_s', 1, 2);
SELECT * FROM sj_step('self');                              -- (1, 1, 1), (2, 2, 2)
SELECT sj_add('self_s', 3, 6);
SELECT * FROM sj_step('self');                              -- (3, 3, 3), (1, 1, 6), (1, 6, 1), (1, 6, 6)
SELECT source FROM streaming.streams WHERE name = 'self';

-- "join between three streams": refused for now (0A000)
SELECT sj_source('three_s');
SELECT stm_error($$SELECT streaming.create_stream('three',
    'SELECT a.k FROM ntc_l a JOIN ntc_r b ON a.k = b.k JOIN three_s c ON c.k = b.k', start => false)$$);

-- "SPARK-35896: metrics in StateOperatorProgress are output correctly"
-- is the "with watermark" case above, whose sj_state gives Spark's
-- total, updated, dropped and removed per step.

-- "joining nullable left join key with nullable right join key" (and the
-- non-nullable variants): <=> is IS NOT DISTINCT FROM, which matches NULL
-- keys; = never does
SELECT sj_sources('nk');
SELECT streaming.create_stream('nk_ndf',
    $$SELECT l.k AS lk, r.k AS rk, l.k * 2 AS lv, r.k * 3 AS rv FROM nk_l l JOIN nk_r r ON l.k IS NOT DISTINCT FROM r.k$$,
    start => false);
SELECT streaming.create_stream('nk_eq',
    $$SELECT l.k AS lk, r.k AS rk, l.k * 2 AS lv, r.k * 3 AS rv FROM nk_l l JOIN nk_r r ON l.k = r.k$$,
    start => false);
SELECT sj_send('nk_l', $$SELECT json_build_object('k', k, 't', to_timestamp(i)) FROM unnest(ARRAY[1, 5, 10, NULL]) WITH ORDINALITY u(k, i) ORDER BY i$$);
SELECT sj_send('nk_r', $$SELECT json_build_object('k', k, 't', to_timestamp(i)) FROM unnest(ARRAY[1, 5, NULL]) WITH ORDINALITY u(k, i) ORDER BY i$$);
SELECT * FROM sj_step('nk_ndf');                            -- (1, 1, 2, 3), (5, 5, 10, 15), (, , , )
SELECT * FROM sj_step('nk_eq');                             -- (1, 1, 2, 3), (5, 5, 10, 15)
-- a NULL key stored on either side still finds its NULL partner later
SELECT sj_send('nk_r', $$SELECT json_build_object('k', NULL, 't', to_timestamp(9))$$);
SELECT * FROM sj_step('nk_ndf');                            -- (, , , )
SELECT * FROM sj_step('nk_eq');                             -- ()

--
-- StreamingOuterJoinSuite
--

-- "left outer early state exclusion on left": leftValue > 4 is over the
-- left alone: a left row that fails it can match nothing, its NULL row
-- comes at once and it is not stored
SELECT sj_sources('lel');
SELECT streaming.create_stream('lel',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, (r.k * 3)::text AS rv
      FROM lel_l l LEFT JOIN lel_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds') AND l.k * 2 > 4$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('lel_l', 1, 2, 3), sj_add('lel_r', 3, 4, 5);
SELECT * FROM sj_step('lel');                               -- (3, 10, 6, "9"), (1, 10, 2, null), (2, 10, 4, null)
SELECT * FROM sj_state('lel');                              -- total 4, updated 4
SELECT sj_add('lel_l', 20), sj_add('lel_r', 21);
SELECT * FROM sj_step('lel');                               -- ()
SELECT sj_add('lel_r', 20);
SELECT * FROM sj_step('lel');                               -- (20, 30, 40, "60")

-- "left outer early state exclusion on right": rightValue > 7 over the
-- right alone: right rows that fail it are never stored
SELECT sj_sources('ler');
SELECT streaming.create_stream('ler',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, (r.k * 3)::text AS rv
      FROM ler_l l LEFT JOIN ler_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds') AND r.k * 3 > 7$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('ler_l', 3, 4, 5), sj_add('ler_r', 1, 2, 3);
SELECT * FROM sj_step('ler');                               -- (3, 10, 6, "9")
SELECT * FROM sj_state('ler');                              -- total 4, updated 4
SELECT sj_add('ler_l', 20), sj_add('ler_r', 21);
SELECT * FROM sj_step('ler');                               -- (4, 10, 8, null), (5, 10, 10, null)
SELECT sj_add('ler_r', 20);
SELECT * FROM sj_step('ler');                               -- (20, 30, 40, "60")

-- "right outer early state exclusion on left"
SELECT sj_sources('rel');
SELECT streaming.create_stream('rel',
    $$SELECT r.k, extract(epoch FROM date_bin('10 seconds', r.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, (r.k * 3)::text AS rv
      FROM rel_l l RIGHT JOIN rel_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds') AND l.k * 2 > 4$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('rel_l', 1, 2, 3), sj_add('rel_r', 3, 4, 5);
SELECT * FROM sj_step('rel');                               -- (3, 10, 6, "9")
SELECT * FROM sj_state('rel');                              -- total 4, updated 4
SELECT sj_add('rel_l', 20), sj_add('rel_r', 21);
SELECT * FROM sj_step('rel');                               -- (4, 10, null, "12"), (5, 10, null, "15")
SELECT sj_add('rel_r', 20);
SELECT * FROM sj_step('rel');                               -- (20, 30, 40, "60")

-- "right outer early state exclusion on right"
SELECT sj_sources('rer');
SELECT streaming.create_stream('rer',
    $$SELECT r.k, extract(epoch FROM date_bin('10 seconds', r.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, (r.k * 3)::text AS rv
      FROM rer_l l RIGHT JOIN rer_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds') AND r.k * 3 > 7$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('rer_l', 3, 4, 5), sj_add('rer_r', 1, 2, 3);
SELECT * FROM sj_step('rer');                               -- (3, 10, 6, "9"), (1, 10, null, "3"), (2, 10, null, "6")
SELECT * FROM sj_state('rer');                              -- total 4, updated 4
SELECT sj_add('rer_l', 20), sj_add('rer_r', 21);
SELECT * FROM sj_step('rer');                               -- ()
SELECT sj_add('rer_r', 20);
SELECT * FROM sj_step('rer');                               -- (20, 30, 40, "60")

-- "windowed left outer join"
SELECT sj_sources('wlo');
SELECT streaming.create_stream('wlo',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, r.k * 3 AS rv
      FROM wlo_l l LEFT JOIN wlo_r r ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('wlo_l', 1, 2, 3, 4, 5), sj_add('wlo_r', 3, 4, 5, 6, 7);
SELECT * FROM sj_step('wlo');                               -- (3, 10, 6, 9), (4, 10, 8, 12), (5, 10, 10, 15)
SELECT sj_add('wlo_l', 21), sj_add('wlo_r', 22);
SELECT * FROM sj_step('wlo');                               -- (1, 10, 2, null), (2, 10, 4, null): watermark 11
-- Spark: total 2, updated 12 (it counts matched-flag updates of the first
-- batch too; ours: the data batch stores 21 and 22, the no-data batch
-- evicts the ten rows of window [0, 10))
SELECT * FROM sj_state('wlo');
SELECT sj_add('wlo_l', 22);
SELECT * FROM sj_step('wlo');                               -- (22, 30, 44, 66)
SELECT * FROM sj_state('wlo');                              -- total 3, updated 1

-- "windowed right outer join"
SELECT sj_sources('wro');
SELECT streaming.create_stream('wro',
    $$SELECT r.k, extract(epoch FROM date_bin('10 seconds', r.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, r.k * 3 AS rv
      FROM wro_l l RIGHT JOIN wro_r r ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('wro_l', 1, 2, 3, 4, 5), sj_add('wro_r', 3, 4, 5, 6, 7);
SELECT * FROM sj_step('wro');                               -- (3, 10, 6, 9), (4, 10, 8, 12), (5, 10, 10, 15)
SELECT sj_add('wro_l', 21), sj_add('wro_r', 22);
SELECT * FROM sj_step('wro');                               -- (6, 10, null, 18), (7, 10, null, 21)
SELECT sj_add('wro_l', 22);
SELECT * FROM sj_step('wro');                               -- (22, 30, 44, 66)
SELECT * FROM sj_state('wro');                              -- total 3, updated 1

-- "left outer with watermark range condition", "right outer with
-- watermark range condition": leftTime BETWEEN rightTime - 5 s AND
-- rightTime + 5 s, selecting (leftKey, rightKey, leftTime, rightTime)
SELECT sj_sources('rng');
SELECT streaming.create_stream('rng_left',
    $$SELECT l.k AS lk, r.k AS rk, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM rng_l l LEFT JOIN rng_r r ON l.k = r.k AND l.t BETWEEN r.t - interval '5 seconds' AND r.t + interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT streaming.create_stream('rng_right',
    $$SELECT l.k AS lk, r.k AS rk, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM rng_l l RIGHT JOIN rng_r r ON l.k = r.k AND l.t BETWEEN r.t - interval '5 seconds' AND r.t + interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('rng_l', 1, 5, 3, 5);
SELECT * FROM sj_steps('rng_left', 'rng_right');    -- ()
SELECT sj_addp('rng_r', 1, 10, 2, 5);
SELECT * FROM sj_steps('rng_left', 'rng_right');    -- (1, 1, 5, 10)
SELECT sj_addp('rng_r', 1, 11);
SELECT * FROM sj_steps('rng_left', 'rng_right');    -- (): left time too low
SELECT * FROM sj_state('rng_left');                         -- total 5, updated 5
SELECT sj_addp('rng_l', 1, 7, 1, 30);
SELECT * FROM sj_steps('rng_left', 'rng_right');    -- (1, 1, 7, 10), (1, 1, 7, 11)
SELECT * FROM sj_state('rng_left');                         -- total 7, updated 2
SELECT sj_addp('rng_r', 0, 30);
SELECT * FROM sj_steps('rng_left', 'rng_right');    -- left: (3, null, 5, null); right: (null, 2, null, 5)
SELECT * FROM sj_state('rng_left');                         -- total 2, updated 1
-- the same with 10-minute watermarks and 3 minutes 30 seconds bounds
SELECT sj_sources('rngm');
SELECT streaming.create_stream('rngm',
    $$SELECT l.k AS lk, r.k AS rk, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM rngm_l l LEFT JOIN rngm_r r
        ON l.k = r.k AND l.t BETWEEN r.t - interval '3 minutes 30 seconds' AND r.t + interval '3:30' MINUTE TO SECOND$$,
    watermarks => '{"l": {"event_time": "t", "delay": "10 minutes"}, "r": {"event_time": "t", "delay": "10 minutes"}}',
    start => false);
SELECT sj_addp('rngm_l', 1, 210, 3, 5);
SELECT * FROM sj_step('rngm');                              -- ()
SELECT sj_addp('rngm_r', 1, 300, 2, 5);
SELECT * FROM sj_step('rngm');                              -- (1, 1, 210, 300)
SELECT sj_addp('rngm_r', 1, 450);
SELECT * FROM sj_step('rngm');                              -- ()
SELECT sj_addp('rngm_l', 1, 260, 1, 1800);
SELECT * FROM sj_step('rngm');                              -- (1, 1, 260, 300), (1, 1, 260, 450)
SELECT sj_addp('rngm_r', 0, 1800);
SELECT * FROM sj_step('rngm');                              -- (3, null, 5, null)
SELECT * FROM sj_state('rngm');                             -- total 2

-- "left outer join with non-key condition violated": a pair that fails
-- the condition is no match, so the NULL row comes even though the keys
-- match
SELECT sj_sources('nkc');
SELECT streaming.create_stream('nkc',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, r.k * 3 AS rv
      FROM nkc_l l LEFT JOIN nkc_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')
       AND l.k * 2 > 10 AND (r.k * 3 < 300 OR r.k * 3 > 1000)$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('nkc_l', 1, 2, 3), sj_add('nkc_r', 1, 2, 3);
SELECT * FROM sj_step('nkc');                               -- (1, 10, 2, null), (2, 10, 4, null), (3, 10, 6, null)
SELECT * FROM sj_state('nkc');                              -- total 3, updated 3: right 1, 2, 3
SELECT sj_add('nkc_l', 20), sj_add('nkc_r', 21);
SELECT * FROM sj_step('nkc');                               -- ()
SELECT * FROM sj_state('nkc');                              -- total 2
SELECT sj_add('nkc_r', 20);
SELECT * FROM sj_step('nkc');                               -- (20, 30, 40, 60)
SELECT * FROM sj_state('nkc');                              -- total 3, updated 1
SELECT sj_add('nkc_l', 40, 41), sj_add('nkc_r', 40, 41);
SELECT * FROM sj_step('nkc');                               -- (40, 50, 80, 120), (41, 50, 82, 123)
SELECT * FROM sj_state('nkc');                              -- total 4
SELECT sj_add('nkc_l', 70), sj_add('nkc_r', 71);
SELECT * FROM sj_step('nkc');                               -- ()
SELECT * FROM sj_state('nkc');                              -- total 2
SELECT sj_add('nkc_r', 70);
SELECT * FROM sj_step('nkc');                               -- (70, 80, 140, 210)
SELECT * FROM sj_state('nkc');                              -- total 3, updated 1
-- rightValue between 300 and 1000: no match, the left rows wait for their NULL rows
SELECT sj_add('nkc_l', 101, 102, 103), sj_add('nkc_r', 101, 102, 103);
SELECT * FROM sj_step('nkc');                               -- ()
SELECT * FROM sj_state('nkc');                              -- total 6, updated 3
SELECT sj_add('nkc_l', 1000), sj_add('nkc_r', 1001);
SELECT * FROM sj_step('nkc');                               -- (101, 110, 202, null), (102, 110, 204, null), (103, 110, 206, null)
SELECT * FROM sj_state('nkc');                              -- total 2

-- "SPARK-26187 self left outer join should not return outer nulls for
-- already matched rows": one source; Spark's right stream is the source
-- filtered to even values before its watermark, ours is the condition's
-- part over b alone (b.k % 2 = 0), so that odd rows are never stored.
-- Difference: each side's watermark is over every row of the source that
-- side reads, so b's is 15 - 5 = 10 after the third step, where Spark's
-- (over even rows only) is 14 - 5 = 9: the left row (5, 5), whose
-- partners (b.t in [5, 10]) are all late at 10, is evicted in the third
-- step and gives its NULL row there; Spark gives it one step later.
SELECT sj_source('sl_s');
SELECT streaming.create_stream('sl_left',
    $$SELECT a.k AS lk, extract(epoch FROM a.t)::int AS lt, b.k AS rk, extract(epoch FROM b.t)::int AS rt
      FROM sl_s a LEFT JOIN sl_s b
        ON a.k = b.k AND b.k % 2 = 0 AND b.t >= a.t AND b.t <= a.t + interval '5 seconds'$$,
    watermarks => :'wm5', start => false);
-- "SPARK-26187 self right outer join ...": the same, flipped
SELECT streaming.create_stream('sl_right',
    $$SELECT a.k AS lk, extract(epoch FROM a.t)::int AS lt, b.k AS rk, extract(epoch FROM b.t)::int AS rt
      FROM sl_s a RIGHT JOIN sl_s b
        ON a.k = b.k AND a.k % 2 = 0 AND a.t >= b.t AND a.t <= b.t + interval '5 seconds'$$,
    watermarks => :'wm5', start => false);
-- "self full outer join" (StreamingFullOuterJoinSuite): in a full join
-- the ON part over b alone would give the odd b rows their own NULL
-- rows; Spark's b has no odd rows, so the WHERE drops those
SELECT streaming.create_stream('sl_full',
    $$SELECT a.k AS lk, extract(epoch FROM a.t)::int AS lt, b.k AS rk, extract(epoch FROM b.t)::int AS rt
      FROM sl_s a FULL JOIN sl_s b
        ON a.k = b.k AND b.k % 2 = 0 AND b.t >= a.t AND b.t <= a.t + interval '5 seconds'
      WHERE b.k IS NULL OR b.k % 2 = 0$$,
    watermarks => :'wm5', start => false);
-- "self left semi join" (StreamingLeftSemiJoinSuite)
SELECT streaming.create_stream('sl_semi',
    $$SELECT a.k AS lk, extract(epoch FROM a.t)::int AS lt FROM sl_s a
      WHERE EXISTS (SELECT FROM sl_s b WHERE a.k = b.k AND b.k % 2 = 0 AND b.t >= a.t AND b.t <= a.t + interval '5 seconds')$$,
    watermarks => :'wm5', start => false);
SELECT sj_add('sl_s', 1, 2, 3, 4, 5);
-- all: (2, 2, 2, 2), (4, 4, 4, 4); semi: (2, 2), (4, 4)
SELECT * FROM sj_steps('sl_left', 'sl_right', 'sl_full', 'sl_semi');
SELECT s, r.* FROM unnest(ARRAY['sl_left', 'sl_full']) s, sj_state(s) r;  -- total 7, updated 7
SELECT sj_add('sl_s', 6, 7, 8, 9, 10);
-- all: (6, 6, 6, 6), (8, 8, 8, 8), (10, 10, 10, 10); semi: (6, 6), (8, 8), (10, 10)
SELECT * FROM sj_steps('sl_left', 'sl_right', 'sl_full', 'sl_semi');
SELECT s, r.* FROM unnest(ARRAY['sl_left', 'sl_full']) s, sj_state(s) r;  -- total 13, updated 8
SELECT sj_add('sl_s', 11, 12, 13, 14, 15);
-- left, full: (12, 12, 12, 12), (14, 14, 14, 14), (1, 1, null, null),
-- (3, 3, null, null) and ours also (5, 5, null, null); right: the same flipped;
-- semi: (12, 12), (14, 14)
SELECT * FROM sj_steps('sl_left', 'sl_right', 'sl_full', 'sl_semi');
SELECT s, r.* FROM unnest(ARRAY['sl_left', 'sl_full']) s, sj_state(s) r;  -- Spark: total 15, updated 7
SELECT name, source, to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI:SS') AS watermark
FROM streaming.streams WHERE name LIKE 'sl\_%' ORDER BY name;

-- "SPARK-32148 stream-stream join regression on Spark 3.0.0": left outer,
-- 2- and 4-minute watermarks, all in one batch
SELECT sj_sources('s32148', 'event_time timestamptz, id text, comment text');
SELECT streaming.create_stream('s32148',
    $$SELECT l.event_time AS l_time, l.id AS l_id, l.comment, r.event_time AS r_time, r.id AS r_id, r.comment AS r_name
      FROM s32148_l l LEFT JOIN s32148_r r
        ON l.id = r.id AND l.event_time BETWEEN r.event_time - interval '30 seconds' AND r.event_time + interval '30 seconds'$$,
    watermarks => '{"l": {"event_time": "event_time", "delay": "2 minutes"}, "r": {"event_time": "event_time", "delay": "4 minutes"}}',
    start => false);
SELECT sj_send('s32148_l', $$SELECT json_build_object('event_time', t || '+00', 'id', 'abc', 'comment', c) FROM (VALUES
    ('2020-01-01 00:00:00', 'has no join partner'), ('2020-01-02 00:00:00', 'joined with A'),
    ('2020-01-02 01:00:00', 'joined with B')) v(t, c)$$),
       sj_send('s32148_r', $$SELECT json_build_object('event_time', t || '+00', 'id', 'abc', 'comment', c) FROM (VALUES
    ('2020-01-02 00:00:10', 'A'), ('2020-01-02 00:59:59', 'B'), ('2020-01-02 02:00:00', 'C')) v(t, c)$$);
SET TIME ZONE 'UTC';
SELECT * FROM sj_step('s32148');
-- (2020-01-01 00:00, abc, has no join partner, null, null, null),
-- (2020-01-02 00:00, abc, joined with A, 2020-01-02 00:00:10, abc, A),
-- (2020-01-02 01:00, abc, joined with B, 2020-01-02 00:59:59, abc, B)

-- "left-outer: joining nullable left join key with nullable right join
-- key": leftKey1 <=> rightKey1 AND leftKey2 = rightKey2 AND windows equal
SELECT sj_sources('lnk', 'k1 int, k2 int, t timestamptz');
SELECT streaming.create_stream('lnk',
    $$SELECT l.k1 AS lk1, r.k1 AS rk1, l.k2 AS lk2, r.k2 AS rk2,
             extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend,
             l.k2 * 2 AS lv, r.k2 * 3 AS rv
      FROM lnk_l l LEFT JOIN lnk_r r
        ON l.k1 IS NOT DISTINCT FROM r.k1 AND l.k2 = r.k2
       AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')$$,
    watermarks => :'wm10', start => false);
CREATE FUNCTION sj_add2(src text, VARIADIC v int[]) RETURNS void LANGUAGE sql BEGIN ATOMIC
SELECT sj_send(src, format($q$SELECT json_build_object('k1', (%1$L::int[])[i], 'k2', (%1$L::int[])[i + 1], 't', to_timestamp((%1$L::int[])[i + 1]))
                              FROM generate_series(1, %2$s, 2) i ORDER BY i$q$, v, cardinality(v)));
END;
SELECT sj_add2('lnk_l', 1, 1, NULL, 2, 1, 3, NULL, 4, 1, 5), sj_add2('lnk_r', 1, 3, NULL, 4, 1, 5, 1, 6);
SELECT * FROM sj_step('lnk');                               -- (1, 1, 3, 3, 10, 6, 9), (null, null, 4, 4, 10, 8, 12), (1, 1, 5, 5, 10, 10, 15)
SELECT sj_add2('lnk_l', 1, 21), sj_add2('lnk_r', 1, 22);
SELECT * FROM sj_step('lnk');                               -- (1, null, 1, null, 10, 2, null), (null, null, 2, null, 10, 4, null)

-- "SPARK-38684: outer join works correctly even if processing input rows
-- and evicting state rows for same grouping key happens in the same
-- micro-batch".  Difference: Spark turns no-data batches off there; here
-- they run (SPEC 3.1), so each NULL row comes one step earlier than in
-- Spark, in the no-data batch after the step that moved the watermark
-- past it: "left in batch 1" (bound 00:00:30) at the second step
-- (watermark 01:00:00), "left in batch 2" (bound 01:00:30) at the third
-- (01:01:00); the fourth step gives the match of "left in batch 3".
SELECT sj_sources('s38684', 'event_time timestamptz, id text, comment text');
SELECT streaming.create_stream('s38684',
    $$SELECT l.event_time AS l_time, l.id AS l_id, l.comment, r.event_time AS r_time, r.id AS r_id, r.comment AS r_comment
      FROM s38684_l l LEFT JOIN s38684_r r
        ON l.id = r.id AND l.event_time BETWEEN r.event_time - interval '30 seconds' AND r.event_time + interval '30 seconds'$$,
    watermarks => '{"l": {"event_time": "event_time", "delay": "0 seconds"}, "r": {"event_time": "event_time", "delay": "0 seconds"}}',
    start => false);
CREATE FUNCTION sj_addc(src text, t text, c text) RETURNS void LANGUAGE sql BEGIN ATOMIC
SELECT sj_send(src, format($q$SELECT json_build_object('event_time', %L, 'id', 'abc', 'comment', %L)$q$, t || '+00', c));
END;
SELECT sj_addc('s38684_l', '2020-01-02 00:00:00', 'left in batch 1'), sj_addc('s38684_r', '2020-01-02 00:01:00', 'right in batch 1');
SELECT * FROM sj_step('s38684');                            -- ()
SELECT sj_addc('s38684_l', '2020-01-02 01:00:00', 'left in batch 2'), sj_addc('s38684_r', '2020-01-02 01:01:00', 'right in batch 2');
SELECT * FROM sj_step('s38684');                            -- Spark: () (ours: left in batch 1 with nulls)
SELECT sj_addc('s38684_l', '2020-01-02 01:30:00', 'left in batch 3');
SELECT * FROM sj_step('s38684');                            -- Spark: left in batch 1 with nulls (ours: left in batch 2)
SELECT sj_addc('s38684_r', '2020-01-02 01:30:10', 'match with left in batch 3');
SELECT * FROM sj_step('s38684');                            -- Spark: left in batch 2 with nulls, left in batch 3 with its match
RESET TIME ZONE;

--
-- StreamingFullOuterJoinSuite
--

-- "windowed full outer join": the key and the window are both sides'
-- (Spark's join on Seq("key", "window") coalesces them)
SELECT sj_sources('wfo');
SELECT streaming.create_stream('wfo',
    $$SELECT coalesce(l.k, r.k) AS k,
             extract(epoch FROM date_bin('10 seconds', coalesce(l.t, r.t), 'epoch') + interval '10 seconds')::int AS wend,
             l.k * 2 AS lv, r.k * 3 AS rv
      FROM wfo_l l FULL JOIN wfo_r r ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('wfo_l', 1, 2, 3, 4, 5), sj_add('wfo_r', 3, 4, 5, 6, 7);
SELECT * FROM sj_step('wfo');                               -- (3, 10, 6, 9), (4, 10, 8, 12), (5, 10, 10, 15)
SELECT * FROM sj_state('wfo');                              -- total 10, updated 10
SELECT sj_add('wfo_l', 21), sj_add('wfo_r', 22);
SELECT * FROM sj_step('wfo');                               -- (1, 10, 2, null), (2, 10, 4, null), (6, 10, null, 18), (7, 10, null, 21)
SELECT * FROM sj_state('wfo');                              -- total 2, updated 2
SELECT sj_add('wfo_l', 22);
SELECT * FROM sj_step('wfo');                               -- (22, 30, 44, 66)
SELECT * FROM sj_state('wfo');                              -- total 3, updated 1
SELECT sj_add('wfo_l', 1);
SELECT * FROM sj_step('wfo');                               -- (): late
SELECT * FROM sj_state('wfo');                              -- total 3, updated 0, dropped 1
SELECT sj_add('wfo_r', 5);
SELECT * FROM sj_step('wfo');                               -- (): late
SELECT * FROM sj_state('wfo');                              -- total 3, updated 0, dropped 1

-- "full outer early state exclusion on left"
SELECT sj_sources('fel');
SELECT streaming.create_stream('fel',
    $$SELECT l.k AS lk, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS lwend, l.k * 2 AS lv,
             r.k AS rk, extract(epoch FROM date_bin('10 seconds', r.t, 'epoch') + interval '10 seconds')::int AS rwend,
             (r.k * 3)::text AS rv
      FROM fel_l l FULL JOIN fel_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds') AND l.k * 2 > 4$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('fel_l', 1, 2, 3), sj_add('fel_r', 3, 4, 5);
SELECT * FROM sj_step('fel');                               -- (1, 10, 2, null, null, null), (2, 10, 4, null, null, null), (3, 10, 6, 3, 10, "9")
SELECT * FROM sj_state('fel');                              -- total 4, updated 4
SELECT sj_add('fel_l', 20), sj_add('fel_r', 21);
SELECT * FROM sj_step('fel');                               -- (null, null, null, 4, 10, "12"), (null, null, null, 5, 10, "15")
SELECT * FROM sj_state('fel');                              -- total 2, updated 2
SELECT sj_add('fel_r', 20);
SELECT * FROM sj_step('fel');                               -- (20, 30, 40, 20, 30, "60")
SELECT * FROM sj_state('fel');                              -- total 3, updated 1

-- "full outer early state exclusion on right"
SELECT sj_sources('fer');
SELECT streaming.create_stream('fer',
    $$SELECT l.k AS lk, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS lwend, l.k * 2 AS lv,
             r.k AS rk, extract(epoch FROM date_bin('10 seconds', r.t, 'epoch') + interval '10 seconds')::int AS rwend,
             (r.k * 3)::text AS rv
      FROM fer_l l FULL JOIN fer_r r
        ON l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds') AND r.k * 3 > 7$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('fer_l', 3, 4, 5), sj_add('fer_r', 1, 2, 3);
SELECT * FROM sj_step('fer');                               -- (null, null, null, 1, 10, "3"), (null, null, null, 2, 10, "6"), (3, 10, 6, 3, 10, "9")
SELECT * FROM sj_state('fer');                              -- total 4, updated 4
SELECT sj_add('fer_l', 20), sj_add('fer_r', 21);
SELECT * FROM sj_step('fer');                               -- (4, 10, 8, null, null, null), (5, 10, 10, null, null, null)
SELECT * FROM sj_state('fer');                              -- total 2, updated 2
SELECT sj_add('fer_r', 20);
SELECT * FROM sj_step('fer');                               -- (20, 30, 40, 20, 30, "60")
SELECT * FROM sj_state('fer');                              -- total 3, updated 1

-- "full outer join with watermark range condition"
SELECT sj_sources('frng');
SELECT streaming.create_stream('frng',
    $$SELECT l.k AS lk, r.k AS rk, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM frng_l l FULL JOIN frng_r r ON l.k = r.k AND l.t BETWEEN r.t - interval '5 seconds' AND r.t + interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('frng_l', 1, 5, 3, 5);
SELECT * FROM sj_step('frng');                              -- ()
SELECT * FROM sj_state('frng');                             -- total 2, updated 2
SELECT sj_addp('frng_r', 1, 10, 2, 5);
SELECT * FROM sj_step('frng');                              -- (1, 1, 5, 10)
SELECT * FROM sj_state('frng');                             -- total 4, updated 2 (ours also counts (1, 5) marked matched)
SELECT sj_addp('frng_r', 1, 9);
SELECT * FROM sj_step('frng');                              -- (1, 1, 5, 9)
SELECT * FROM sj_state('frng');                             -- total 5, updated 1
SELECT sj_addp('frng_l', 1, 7, 1, 30);
SELECT * FROM sj_step('frng');                              -- (1, 1, 7, 9), (1, 1, 7, 10)
SELECT * FROM sj_state('frng');                             -- total 7, updated 2
SELECT sj_addp('frng_r', 0, 30);
SELECT * FROM sj_step('frng');                              -- (3, null, 5, null), (null, 2, null, 5)
SELECT * FROM sj_state('frng');                             -- total 2, updated 1

--
-- StreamingLeftSemiJoinSuite
--

-- "windowed left semi join": a left row is given once, at its first
-- match, and is not stored (or is dropped from the state) then
SELECT sj_sources('wls');
SELECT streaming.create_stream('wls',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend, l.k * 2 AS lv
      FROM wls_l l
      WHERE EXISTS (SELECT FROM wls_r r WHERE l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds'))$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('wls_l', 1, 2, 3, 4, 5), sj_add('wls_r', 3, 4, 5, 6, 7);
SELECT * FROM sj_step('wls');                               -- (3, 10, 6), (4, 10, 8), (5, 10, 10)
-- Spark: total 10, updated 10 (it stores the matched left rows 3, 4, 5 too)
SELECT * FROM sj_state('wls');
SELECT sj_add('wls_l', 21), sj_add('wls_r', 22);
SELECT * FROM sj_step('wls');                               -- ()
SELECT * FROM sj_state('wls');                              -- total 2, updated 2
SELECT sj_add('wls_l', 22);
SELECT * FROM sj_step('wls');                               -- (22, 30, 44)
SELECT * FROM sj_state('wls');                              -- total 2, updated 0
SELECT sj_add('wls_l', 1);
SELECT * FROM sj_step('wls');                               -- (): late
SELECT * FROM sj_state('wls');                              -- total 2, updated 0, dropped 1
SELECT sj_add('wls_r', 5);
SELECT * FROM sj_step('wls');                               -- (): late
SELECT * FROM sj_state('wls');                              -- total 2, updated 0, dropped 1

-- "left semi early state exclusion on left"
SELECT sj_sources('sel');
SELECT streaming.create_stream('sel',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend, l.k * 2 AS lv
      FROM sel_l l
      WHERE EXISTS (SELECT FROM sel_r r WHERE l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')
                    AND l.k * 2 > 4)$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('sel_l', 1, 2, 3), sj_add('sel_r', 3, 4, 5);
SELECT * FROM sj_step('sel');                               -- (3, 10, 6)
SELECT * FROM sj_state('sel');                              -- Spark: total 4 (ours does not keep the matched left 3)
SELECT sj_add('sel_l', 20), sj_add('sel_r', 21);
SELECT * FROM sj_step('sel');                               -- ()
SELECT sj_add('sel_r', 20);
SELECT * FROM sj_step('sel');                               -- (20, 30, 40)
SELECT * FROM sj_state('sel');                              -- Spark: total 3

-- "left semi early state exclusion on right"
SELECT sj_sources('ser');
SELECT streaming.create_stream('ser',
    $$SELECT l.k, extract(epoch FROM date_bin('10 seconds', l.t, 'epoch') + interval '10 seconds')::int AS wend, l.k * 2 AS lv
      FROM ser_l l
      WHERE EXISTS (SELECT FROM ser_r r WHERE l.k = r.k AND streaming.tumble(l.t, '10 seconds') = streaming.tumble(r.t, '10 seconds')
                    AND r.k * 3 > 7)$$,
    watermarks => :'wm10', start => false);
SELECT sj_add('ser_l', 3, 4, 5), sj_add('ser_r', 1, 2, 3);
SELECT * FROM sj_step('ser');                               -- (3, 10, 6)
SELECT sj_add('ser_l', 20), sj_add('ser_r', 21);
SELECT * FROM sj_step('ser');                               -- ()
SELECT sj_add('ser_r', 20);
SELECT * FROM sj_step('ser');                               -- (20, 30, 40)

-- "left semi join with watermark range condition", and ours: the left
-- anti join (NOT EXISTS) over the same input gives the left rows that are
-- evicted without a match
SELECT sj_sources('srng');
SELECT streaming.create_stream('srng_semi',
    $$SELECT l.k AS lk, extract(epoch FROM l.t)::int AS lt FROM srng_l l
      WHERE EXISTS (SELECT FROM srng_r r WHERE l.k = r.k AND l.t BETWEEN r.t - interval '5 seconds' AND r.t + interval '5 seconds')$$,
    watermarks => :'wm10', start => false);
SELECT streaming.create_stream('srng_anti',
    $$SELECT l.k AS lk, extract(epoch FROM l.t)::int AS lt FROM srng_l l
      WHERE NOT EXISTS (SELECT FROM srng_r r WHERE l.k = r.k AND l.t BETWEEN r.t - interval '5 seconds' AND r.t + interval '5 seconds')$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('srng_l', 1, 5, 3, 5);
SELECT * FROM sj_steps('srng_semi', 'srng_anti');   -- ()
SELECT sj_addp('srng_r', 1, 10, 2, 5);
SELECT * FROM sj_steps('srng_semi', 'srng_anti');   -- semi: (1, 5)
SELECT sj_addp('srng_r', 1, 9);
SELECT * FROM sj_steps('srng_semi', 'srng_anti');   -- (): (1, 5) matched already
SELECT sj_addp('srng_l', 1, 7, 1, 30);
SELECT * FROM sj_steps('srng_semi', 'srng_anti');   -- semi: (1, 7)
SELECT * FROM sj_state('srng_semi');                        -- Spark: total 6
SELECT sj_addp('srng_r', 0, 30);
SELECT * FROM sj_steps('srng_semi', 'srng_anti');   -- semi: (); anti: (3, 5)
SELECT * FROM sj_state('srng_semi');                        -- total 2, updated 1
-- a final watermark flush: (1, 30) never matched
SELECT sj_addp('srng_l', 9, 100), sj_addp('srng_r', 9, 100);
SELECT * FROM sj_steps('srng_semi', 'srng_anti');   -- semi: (9, 100); anti: (1, 30)

--
-- ours
--

-- rows arriving in either order across batches, in a left outer join: a
-- row stored unmatched and matched by a later batch's row gives no NULL
-- row; a pair is found once whichever side comes first
SELECT sj_sources('ord');
SELECT streaming.create_stream('ord',
    $$SELECT l.k AS lk, extract(epoch FROM l.t)::int AS lt, r.k AS rk, extract(epoch FROM r.t)::int AS rt
      FROM ord_l l LEFT JOIN ord_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('ord_l', 1, 5);
SELECT * FROM sj_step('ord');                               -- ()
SELECT sj_addp('ord_r', 1, 6);
SELECT * FROM sj_step('ord');                               -- (1, 5, 1, 6)
SELECT sj_addp('ord_r', 2, 8);
SELECT * FROM sj_step('ord');                               -- ()
SELECT sj_addp('ord_l', 2, 7, 3, 9);
SELECT * FROM sj_step('ord');                               -- (2, 7, 2, 8)
SELECT sj_addp('ord_r', 1, 9);
SELECT * FROM sj_step('ord');                               -- (1, 5, 1, 9): a second match of a stored left row
SELECT sj_addp('ord_l', 0, 40), sj_addp('ord_r', 0, 40);
SELECT * FROM sj_step('ord');                               -- (0, 40, 0, 40), (3, 9, null, null): 1 and 2 matched
SELECT count(*) AS null_rows FROM ord WHERE rk IS NULL;

-- late rows kept (late_rows => 'keep'): counted per side and written to
-- streaming.late_rows with their position
SELECT sj_sources('lk');
SELECT streaming.create_stream('lk',
    $$SELECT l.k AS lk, r.k AS rk FROM lk_l l JOIN lk_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'$$,
    watermarks => :'wm10', late_rows => 'keep', start => false);
SELECT sj_addp('lk_l', 1, 30), sj_addp('lk_r', 1, 31);
SELECT * FROM sj_step('lk');                                -- (1, 1): watermark 20
SELECT sj_addp('lk_l', 2, 20, 3, 21), sj_addp('lk_r', 2, 19, 2, 20, 3, 22);
SELECT * FROM sj_step('lk');                                -- (3, 3): left 20, right 19 and 20 late
SELECT * FROM sj_state('lk');
SELECT to_char(event_time AT TIME ZONE 'UTC', 'HH24:MI:SS') AS event_time, stm_strip(position::text) AS position
FROM streaming.late_rows WHERE stream = 'lk' ORDER BY event_time, position;
SELECT batch_id, num_late_rows FROM streaming.progress WHERE stream = 'lk' AND num_late_rows > 0;

-- min vs max multiple_watermark_policy: the left moves fast, the right
-- slowly; with max the right's rows behind the left's watermark are late
SELECT sj_sources('pol');
SELECT streaming.create_stream('pol_min',
    $$SELECT l.k AS lk, r.k AS rk FROM pol_l l JOIN pol_r r ON r.k = l.k AND r.t BETWEEN l.t - interval '100 seconds' AND l.t$$,
    watermarks => :'wm10', start => false);
SELECT streaming.create_stream('pol_max',
    $$SELECT l.k AS lk, r.k AS rk FROM pol_l l JOIN pol_r r ON r.k = l.k AND r.t BETWEEN l.t - interval '100 seconds' AND l.t$$,
    watermarks => :'wm10', multiple_watermark_policy => 'max', start => false);
SELECT sj_addp('pol_l', 1, 100), sj_addp('pol_r', 9, 30);
SELECT * FROM sj_steps('pol_min', 'pol_max');       -- ()
SELECT name, extract(epoch FROM watermark) AS watermark FROM streaming.streams WHERE name LIKE 'pol\_%' ORDER BY name;  -- 20, 90
SELECT sj_addp('pol_r', 1, 50);
SELECT * FROM sj_steps('pol_min', 'pol_max');       -- min: (1, 1); max: () (50 <= 90: late)
SELECT stream, sum(num_late_rows) AS late FROM streaming.progress WHERE stream LIKE 'pol\_%' GROUP BY stream ORDER BY stream;
SELECT stm_error($$SELECT streaming.create_stream('pol_bad', 'SELECT l.k FROM pol_l l JOIN pol_r r ON r.k = l.k',
    watermarks => '{"l": {"event_time": "t", "delay": "1 second"}}', multiple_watermark_policy => 'median', start => false)$$);

-- a quiet side's idle_timeout (in watermarks): a left outer join whose
-- right has no records; with min, the right (nothing seen: 1970) holds
-- the watermark back, and no NULL row comes, until the right's idle
-- advance (as if a record of now() - delay came) lets the left's
-- watermark be the stream's
SELECT sj_sources('idl');
SELECT streaming.create_stream('idl_wait',
    $$SELECT l.k AS lk, r.k AS rk FROM idl_l l LEFT JOIN idl_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT streaming.create_stream('idl',
    $$SELECT l.k AS lk, r.k AS rk FROM idl_l l LEFT JOIN idl_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'$$,
    watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds", "idle_timeout": "1 second"}}',
    start => false);
SELECT sj_addp('idl_l', 1, 5, 2, 30);
-- (idl's rows are shown after the wait only: its idle batch may come
-- without it on a slow machine)
SELECT * FROM sj_step('idl_wait'), (SELECT count(*) FROM sj_step('idl')) idl;   -- ()
SELECT name, extract(epoch FROM watermark) AS watermark FROM streaming.streams WHERE name = 'idl_wait';
-- (the wait is for the right's idle clock: its idle_timeout after its first batch)
SELECT count(pg_sleep_until(to_timestamp((side_watermarks->'r'->>'idle_clock_us')::float8 / 1e6 + 946684800) + interval '1 second')) AS waited
FROM streaming.stream_defs WHERE name = 'idl';
SELECT * FROM sj_step('idl_wait'), (SELECT count(*) FROM sj_step('idl')) idl;   -- idl_wait: ()
SELECT * FROM idl;                                          -- (1, null): the stream's watermark is the left's, 20
SELECT name, extract(epoch FROM watermark) AS watermark FROM streaming.streams WHERE name LIKE 'idl%' ORDER BY name;

-- the joined rows joined with a table: inner, and left outer whose NULL
-- rows go through the table join too
CREATE TABLE sj_names (k int PRIMARY KEY, name text);
INSERT INTO sj_names VALUES (1, 'one'), (2, 'two'), (3, 'three');
SELECT sj_sources('tab');
SELECT streaming.create_stream('tab_inner',
    $$SELECT l.k, n.name, r.t - l.t AS lag FROM tab_l l JOIN tab_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'
      JOIN sj_names n ON n.k = l.k$$,
    watermarks => :'wm10', start => false);
SELECT streaming.create_stream('tab_left',
    $$SELECT l.k, n.name, r.k AS rk FROM tab_l l LEFT JOIN tab_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'
      LEFT JOIN sj_names n ON n.k = l.k$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('tab_l', 1, 1, 2, 2, 4, 4), sj_addp('tab_r', 1, 3, 4, 5);
SELECT * FROM sj_steps('tab_inner', 'tab_left');    -- inner: (1, one, 2 s); left: (1, one, 1), (4, , 4)
SELECT sj_addp('tab_l', 0, 40), sj_addp('tab_r', 0, 40);
SELECT * FROM sj_steps('tab_inner', 'tab_left');    -- left: (2, two, null) at the flush
SELECT stm_error($$SELECT streaming.create_stream('tab_bad', 'SELECT l.k FROM tab_l l JOIN tab_r r ON r.k = l.k RIGHT JOIN sj_names n ON n.k = l.k',
    start => false)$$);

-- an aggregate over a join, in append and update mode: its windows close
-- at the stream's watermark minus the join's largest bound (5 seconds),
-- when no joined row can still arrive for them
SELECT sj_sources('agg');
SELECT streaming.create_stream('agg_append',
    $$SELECT streaming.window_start() AS ws, count(*) AS n, sum(r.k) AS total
      FROM agg_l l JOIN agg_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'
      GROUP BY streaming.tumble(l.t, '10 seconds')$$,
    watermarks => :'wm10', start => false);
SELECT streaming.create_stream('agg_update',
    $$SELECT streaming.window_start() AS ws, count(*) AS n, sum(r.k) AS total
      FROM agg_l l JOIN agg_r r ON r.k = l.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'
      GROUP BY streaming.tumble(l.t, '10 seconds')$$,
    watermarks => :'wm10', output_mode => 'update', start => false);
-- pairs (1, 1)-(1, 2) and (2, 8)-(2, 12) in window [0, 10), (3, 12)-(3, 13) in [10, 20)
SELECT sj_addp('agg_l', 1, 1, 2, 8, 3, 12), sj_addp('agg_r', 1, 2, 2, 12, 3, 13);
SELECT * FROM sj_steps('agg_append', 'agg_update'); -- append: (); update: [0, 10): 2 rows, [10, 20): 1
-- watermark 14: a left row of 9.x and a right row of 14.x could still
-- pair in [0, 10), so it stays open (10 > 14 - 5)
SELECT sj_addp('agg_l', 9, 24), sj_addp('agg_r', 9, 24);
SELECT * FROM sj_steps('agg_append', 'agg_update'); -- append: (); update: [20, 30): 1
-- watermark 16: [0, 10) closes (10 <= 16 - 5)
SELECT sj_addp('agg_l', 9, 26), sj_addp('agg_r', 9, 26);
SELECT * FROM sj_steps('agg_append', 'agg_update'); -- append: [0, 10); update: [20, 30): 3 rows
-- watermark 50: [10, 20) and [20, 30) close
SELECT sj_addp('agg_l', 9, 60), sj_addp('agg_r', 9, 60);
SELECT * FROM sj_steps('agg_append', 'agg_update'); -- append: [10, 20), [20, 30); update: [60, 70)
SELECT * FROM agg_append ORDER BY ws;
SELECT * FROM agg_update ORDER BY ws;
SELECT stm_error($$SELECT streaming.create_stream('agg_bad', 'SELECT l.k, r.k AS rk FROM agg_l l JOIN agg_r r ON r.k = l.k',
    output_mode => 'update', start => false)$$);

-- progress and streams of a join: both sources, the combined watermark,
-- num_state_rows and num_late_rows the sums over the sides
SELECT name, source, to_char(watermark AT TIME ZONE 'UTC', 'HH24:MI:SS') AS watermark FROM streaming.streams
WHERE name IN ('wfo', 'tr2', 'self') ORDER BY name;
SELECT batch_id, num_input_rows, num_output_rows, num_late_rows, num_state_rows,
       (SELECT sum((v->>'numRowsTotal')::int) FROM jsonb_each(state_operators) o(k, v)) AS total,
       (SELECT sum((v->>'numRowsDroppedByWatermark')::int) FROM jsonb_each(state_operators) o(k, v)) AS late
FROM streaming.progress WHERE stream = 'wfo' ORDER BY batch_id;
SELECT state_operators FROM streaming.progress WHERE stream = 'wfo' ORDER BY batch_id DESC LIMIT 1;
SELECT source, sum(committed_offset) AS offsets FROM streaming.source_lag WHERE stream = 'wfo'
GROUP BY source ORDER BY source;

-- reset empties both state tables and starts both sources over; drop_stream drops them
SELECT format('streaming.join_%s_left', id) AS wfo_left, format('streaming.join_%s_right', id) AS wfo_right
FROM streaming.stream_defs WHERE name = 'wfo' \gset
SELECT (SELECT count(*) FROM :wfo_left) AS left_rows, (SELECT count(*) FROM :wfo_right) AS right_rows;
SELECT streaming.reset('wfo');
SELECT (SELECT count(*) FROM :wfo_left) AS left_rows, (SELECT count(*) FROM :wfo_right) AS right_rows;
TRUNCATE wfo;
DELETE FROM sj_seen WHERE stream = 'wfo';
-- the whole input again, in one batch: nothing is late then, so the
-- second 1 and 5 of the left, and 5 of the right, are joined too
SELECT * FROM sj_step('wfo');
SELECT streaming.drop_stream('wfo', drop_sink => true);
SELECT to_regclass(:'wfo_left') AS left_table, to_regclass(:'wfo_right') AS right_table;

-- a batch's new rows that the watermark it commits evicts are not stored:
-- they could meet only rows that are late from the next batch on.  One
-- batch of both sides, W becoming min(100, 100) - 10 = 90: the left's 1
-- (bound 6) and the right's 2 (bound 2) matched and are not kept; the
-- left's 5 (bound 10) is kept unmatched for its NULL row, which the
-- no-data batch gives as it evicts it; 100 and 100 wait
SELECT sj_sources('dm');
SELECT streaming.create_stream('dm',
    $$SELECT l.k AS lk, r.k AS rk, extract(epoch FROM l.t)::int AS lt, extract(epoch FROM r.t)::int AS rt
      FROM dm_l l LEFT JOIN dm_r r ON l.k = r.k AND r.t BETWEEN l.t AND l.t + interval '5 seconds'$$,
    watermarks => :'wm10', start => false);
SELECT sj_addp('dm_l', 1, 1, 5, 5, 100, 100), sj_addp('dm_r', 1, 2, 100, 100);
SELECT * FROM sj_step('dm');                -- (1, 1, 1, 2), (100, 100, 100, 100), then (5, null, 5, null)
SELECT batch_id, num_output_rows, state_operators->'l'->>'numRowsTotal' AS l_total,
       state_operators->'r'->>'numRowsTotal' AS r_total, state_operators->'l'->>'numNullRows' AS l_null
FROM streaming.progress WHERE stream = 'dm' ORDER BY batch_id;
SELECT * FROM sj_state('dm');                               -- l: total 1 (100), r: total 1 (100)
SELECT streaming.drop_stream('dm', drop_sink => true);

--
-- refusals
--
-- no equality between the sides
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM ntc_l l JOIN ntc_r r ON l.t < r.t', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM ntc_l l, ntc_r r WHERE l.k + r.k = 3', start => false)$$);
-- outer, semi, anti without watermarks on both sides
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l LEFT JOIN rng_r r ON l.k = r.k AND l.t BETWEEN r.t AND r.t + interval ''1 second''', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l FULL JOIN rng_r r ON l.k = r.k AND l.t BETWEEN r.t AND r.t + interval ''1 second''',
    watermarks => '{"l": {"event_time": "t", "delay": "1 second"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l WHERE EXISTS (SELECT FROM rng_r r WHERE l.k = r.k AND l.t < r.t)',
    watermarks => '{"rng_l": {"event_time": "t", "delay": "1 second"}}', start => false)$$);
-- outer, semi, anti without a time condition that bounds the rows that wait
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l LEFT JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', start => false)$$);
-- (a left outer join needs the left bounded: l.t < r.t bounds only the right)
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l LEFT JOIN rng_r r ON l.k = r.k AND l.t < r.t', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT r.k FROM rng_l l RIGHT JOIN rng_r r ON l.k = r.k AND l.t > r.t', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l WHERE NOT EXISTS (SELECT FROM rng_r r WHERE l.k = r.k)', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l WHERE EXISTS (SELECT FROM rng_r r WHERE l.k = r.k AND r.t > l.t)', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', start => false)$$);
-- windows of different sizes bound nothing
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l FULL JOIN rng_r r ON l.k = r.k
    AND streaming.tumble(l.t, ''10 seconds'') = streaming.tumble(r.t, ''20 seconds'')', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', start => false)$$);
-- malformed watermarks: 22023
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '[1, 2]', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"x": {"event_time": "t", "delay": "1 second"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": "1 second"}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "t"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "t", "delay": "-1 second"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "t", "delay": "1 second", "idle_timeout": "0"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "nope", "delay": "1 second"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "k", "delay": "1 second"}}', start => false)$$);
-- watermarks without a join; watermark, event_time, dedup_keys, idle_timeout, output_mode given to a join
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT k FROM rng_l', watermarks => '{"rng_l": {"event_time": "t", "delay": "1 second"}}', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermark => '1 second', event_time => 't', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', dedup_keys => ARRAY['k'], start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', watermarks => '{"l": {"event_time": "t", "delay": "10 seconds"}, "r": {"event_time": "t", "delay": "10 seconds"}}', idle_timeout => '1 minute', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k', output_mode => 'update', start => false)$$);
-- a self-join needs two aliases
SELECT stm_error($$SELECT streaming.create_stream('bad', 'SELECT self_s.k FROM self_s JOIN self_s USING (k)', start => false)$$);
-- nothing was left behind
SELECT count(*) AS bad_streams FROM streaming.stream_defs WHERE name = 'bad';
SELECT to_regclass('bad') AS bad_sink;
-- the unbounded inner join's WARNING (once per side that is unbounded)
SELECT streaming.create_stream('warned', 'SELECT l.k FROM rng_l l JOIN rng_r r ON l.k = r.k AND r.t > l.t', watermarks => :'wm10', start => false);

-- clean up
SELECT count(streaming.drop_stream(name, drop_sink => true)) AS dropped FROM streaming.stream_defs
WHERE source IN (SELECT source FROM sj_made);
SELECT count(*) AS join_tables_left FROM pg_tables WHERE schemaname = 'streaming' AND tablename LIKE 'join\_%';
SELECT count(streaming.drop_source(source)) AS sources FROM sj_made;
DROP TABLE sj_seen, sj_from, sj_names, sj_made;
DROP FUNCTION sj_source, sj_sources, sj_send, sj_addp, sj_add, sj_add2, sj_addc, sj_step, sj_steps, sj_state;
DROP FUNCTION stm_strip, stm_error, stm_check, stm_sessions;
