\set ECHO none
--
-- test/regress_helpers.sql: functions that regress tests share, included
-- with \i test/regress_helpers.sql (pg_regress runs psql in the checkout,
-- with the test on stdin); each test drops them at its end.  Not echoed
-- into the tests' output.
--
-- stm_strip(t): t without the run's suffix of topic names (the test sets
-- stm.run to KAFKA_RUN_ID); stm_error(sql): the SQLSTATE, message and
-- detail of the error that sql raises, without that suffix, or 'no error'.
CREATE OR REPLACE FUNCTION stm_strip(t text) RETURNS text
    LANGUAGE sql STABLE RETURN replace(t, coalesce(current_setting('stm.run', true), ''), '');
CREATE OR REPLACE FUNCTION stm_error(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL;
    RETURN SQLSTATE || ': ' || stm_strip(SQLERRM)
        || CASE WHEN d <> '' THEN E'\nDETAIL: ' || stm_strip(d) ELSE '' END;
END $$;

-- stm_produce(topic, query): the query's rows (one JSON value each) to
-- partition 0 of the topic, with kcat (KAFKA_BOOTSTRAP is in the server's
-- environment).
CREATE OR REPLACE FUNCTION stm_produce(topic text, query text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (%s) TO PROGRAM %L', query,
                   'kcat -P -b "$KAFKA_BOOTSTRAP" -t ' || topic || ' -p 0');
END
$$;

-- stm_check(streams): run every stream's due batches (streaming.run_batch
-- until it returns NULL, in the caller's transaction), then compare each
-- sink with the view <stream>_expected (EXCEPT ALL both ways: NULLs are
-- equal, as in GROUP BY).  null_rows: sink rows with a NULL column;
-- state_updated: whether a row of the stream's state table was updated in
-- this transaction.
CREATE OR REPLACE FUNCTION stm_check(streams text[])
RETURNS TABLE (stream text, batches int, missing_from_expected bigint, missing_from_sink bigint,
               rows bigint, null_rows bigint, state_updated boolean)
LANGUAGE plpgsql AS $$
BEGIN
    FOREACH stream IN ARRAY streams
    LOOP
        batches := 0;
        WHILE streaming.run_batch(stream) IS NOT NULL LOOP
            batches := batches + 1;
        END LOOP;
        EXECUTE format('SELECT (SELECT count(*) FROM (TABLE %1$I EXCEPT ALL TABLE %2$I) d),
                               (SELECT count(*) FROM (TABLE %2$I EXCEPT ALL TABLE %1$I) d),
                               (SELECT count(*) FROM %1$I),
                               (SELECT count(*) FROM %1$I s WHERE NOT (s IS NOT NULL))',
                       stream, stream || '_expected')
            INTO missing_from_expected, missing_from_sink, rows, null_rows;
        SELECT n_tup_upd > 0 INTO state_updated FROM pg_stat_xact_user_tables
        WHERE relid = to_regclass(format('streaming.state_%s', (SELECT id FROM streaming.stream_defs WHERE name = stream)));
        RETURN NEXT;
    END LOOP;
END
$$;

-- stm_sessions(query, gap): session windows in SQL (gaps and islands) over
-- the query's rows (k text, v int, ts timestamptz): per k, a row more than
-- the gap after the one before it starts a session [first ts, last ts +
-- gap); count and sum of v per session.
CREATE OR REPLACE FUNCTION stm_sessions(query text, gap interval)
RETURNS TABLE (ws timestamptz, we timestamptz, k text, n bigint, total bigint)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY EXECUTE format($q$
        WITH r AS (%s),
        marked AS (
            SELECT k, v, ts, CASE WHEN ts <= lag(ts) OVER w + $1 THEN 0 ELSE 1 END AS starts
            FROM r WINDOW w AS (PARTITION BY k ORDER BY ts)),
        numbered AS (
            SELECT *, sum(starts) OVER (PARTITION BY k ORDER BY ts ROWS UNBOUNDED PRECEDING) AS session
            FROM marked)
        SELECT min(ts), max(ts) + $1, k, count(*), sum(v) FROM numbered GROUP BY k, session$q$,
        query) USING gap;
END
$$;
\set ECHO all
