--
-- ext_aggregates: aggregates of other extensions in streams (SPEC 3):
-- tdigest (postgresql-15-tdigest) and hll (postgresql-15-hll), whose
-- states are internal and serialized between batches, in every output mode,
-- against the same aggregates in plain SQL over the same rows.
--
-- Their support functions are called as nodeAgg.c calls them in a partial
-- and a finalize Agg: tdigest's deserialize function reads its argument
-- without detoasting it, so a stored state that the state table compressed
-- or moved out of line must reach it in memory, as a Finalize Agg's input
-- does.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment: records
-- are produced with COPY ... TO PROGRAM kcat), KAFKA_RUN_ID (optional topic
-- suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET ea.run = :'run';
CREATE EXTENSION tdigest;
CREATE EXTENSION hll;

-- the same rows in a table and, part by part, in a topic: distinct values
-- of v in a random-looking order, 10-minute windows of 600 rows (300 per g)
CREATE TABLE ea_rows AS
SELECT g AS id, g % 2 AS g, ((g * 7919) % 3001) / 3.0::float8 AS v,
       timestamptz '2024-01-01 10:00:00+00' + g * interval '1 second' AS ts
FROM generate_series(1, 3000) g;
CREATE FUNCTION ea_produce(lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('COPY (SELECT row_to_json(r) FROM ea_rows r WHERE id BETWEEN %s AND %s ORDER BY id) TO PROGRAM %L',
                   lo, hi, 'kcat -P -b "$KAFKA_BOOTSTRAP" -t ea_rows' || current_setting('ea.run') || ' -p 0');
END
$$;
\set t ea_rows:run
SELECT ea_produce(1, 1000);
SELECT streaming.create_kafka_source('ea_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'id bigint, g int, v float8, ts timestamptz');

-- the rows read so far
CREATE TABLE ea_read (last_id int);
INSERT INTO ea_read VALUES (1000);

--
-- What plain SQL gives over the same rows.  hll: hll_cardinality of
-- hll_add_agg, which the stream must match exactly (a union of hll states
-- is the hll of the union).  tdigest: a percentile estimate is right within
-- the digest's own error, which is an error in rank: tdigest_compact merges
-- centroids only while count * compression / (2 pi n ln n) <= q (1 - q), so
-- a centroid at quantile q holds at most a fraction 2 pi ln(n) q (1 - q) /
-- compression of the n rows, and an estimate interpolated between centroids
-- is off in rank by about that at most, plus one row.  For compression 100
-- and the 300 rows of a window's group that is 2% at q = 0.95 and 9% at
-- q = 0.5.  So the estimate must lie between percentile_cont(q - tol) and
-- percentile_cont(q + tol) of the group's rows.
--
CREATE FUNCTION ea_tolerance(q float8, n bigint) RETURNS float8 IMMUTABLE LANGUAGE sql
    RETURN q * (1 - q) * 2 * pi() * ln(n) / 100 + 1.0 / n;
-- the rows of a group read so far (window start w, or NULL: no window)
CREATE FUNCTION ea_group(w timestamptz, grp int) RETURNS SETOF ea_rows STABLE LANGUAGE sql AS $$
    SELECT * FROM ea_rows
    WHERE id <= (SELECT last_id FROM ea_read) AND g = grp
      AND (w IS NULL OR date_bin('10 minutes', ts, 'epoch') = w)
$$;
-- the bounds of the estimates of quantiles 1: 0.5, 2: 0.95 and 3: 0.99 over
-- the n rows of a group, and whether an estimate of quantile k is in them
CREATE FUNCTION ea_fraction(q float8, n bigint, side int) RETURNS float8 IMMUTABLE LANGUAGE sql
    RETURN greatest(least(q + side * ea_tolerance(q, n), 1), 0);
CREATE FUNCTION ea_bounds(w timestamptz, grp int, n bigint) RETURNS float8[] STABLE LANGUAGE sql AS $$
    SELECT percentile_cont(ARRAY[ea_fraction(0.5, n, -1), ea_fraction(0.5, n, 1),
                                 ea_fraction(0.95, n, -1), ea_fraction(0.95, n, 1),
                                 ea_fraction(0.99, n, -1), ea_fraction(0.99, n, 1)])
           WITHIN GROUP (ORDER BY v)
    FROM ea_group(w, grp)
$$;
CREATE FUNCTION ea_in(est float8, bounds float8[], k int) RETURNS boolean IMMUTABLE LANGUAGE sql
    RETURN est BETWEEN bounds[2 * k - 1] AND bounds[2 * k];
CREATE VIEW ea_expected AS
SELECT date_bin('10 minutes', ts, 'epoch') AS ws, g, count(*) AS n,
       hll_cardinality(hll_add_agg(hll_hash_bigint(id % 400))) AS card,
       ea_bounds(date_bin('10 minutes', ts, 'epoch'), g, count(*)) AS bounds
FROM ea_rows WHERE id <= (SELECT last_id FROM ea_read) GROUP BY 1, 2;
-- a sink against ea_expected: its groups (those of windows closed by
-- closed_at in append mode), counts, hll cardinalities, percentiles
CREATE FUNCTION ea_check(sink regclass, closed_at timestamptz DEFAULT 'infinity',
    OUT groups bigint, OUT expected bigint, OUT same_n bigint, OUT same_hll bigint,
    OUT p95_ok bigint, OUT p50_p99_ok bigint, OUT digest_ok bigint)
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format($q$
        SELECT count(s.ws), count(e.ws),
               count(*) FILTER (WHERE s.n = e.n),
               count(*) FILTER (WHERE s.card = e.card),
               count(*) FILTER (WHERE ea_in(s.p95, e.bounds, 2)),
               count(*) FILTER (WHERE ea_in(s.pcts[1], e.bounds, 1) AND ea_in(s.pcts[2], e.bounds, 3)),
               -- (tdigest_percentile of a digest is an aggregate too: over one row)
               count(*) FILTER (WHERE ea_in((SELECT tdigest_percentile(d, 0.95) FROM (VALUES (s.digest)) x (d)),
                                            e.bounds, 2))
        FROM %s s FULL JOIN (SELECT * FROM ea_expected WHERE ws + interval '10 minutes' <= $1) e
             USING (ws, g)$q$, sink)
    INTO groups, expected, same_n, same_hll, p95_ok, p50_p99_ok, digest_ok
    USING closed_at;
END
$$;

--
-- one query, tumbling windows, in the three output modes
--
\set query 'SELECT streaming.window_start() AS ws, g, count(*) AS n, tdigest_percentile(v, 100, 0.95) AS p95, tdigest_percentile(v, 100, ARRAY[0.5, 0.99]) AS pcts, tdigest(v, 100) AS digest, hll_cardinality(hll_add_agg(hll_hash_bigint(id % 400))) AS card FROM ea_src GROUP BY streaming.tumble(ts, \'10 minutes\'), g'
SELECT streaming.create_stream('ea_update', :'query', output_mode => 'update', start => false);
SELECT streaming.create_stream('ea_complete', :'query', output_mode => 'complete', start => false);
SELECT streaming.create_stream('ea_append', :'query', output_mode => 'append',
    watermark => '1 minute', start => false);
-- no window: one digest and one hll per g over every row (large states)
SELECT streaming.create_stream('ea_global',
    $$SELECT g, count(*) AS n, tdigest_percentile(v, 100, 0.95) AS p95,
             hll_cardinality(hll_add_agg(hll_hash_bigint(id))) AS card
      FROM ea_src GROUP BY g$$,
    output_mode => 'complete', start => false);
CREATE VIEW ea_expected_global AS
SELECT g, count(*) AS n, hll_cardinality(hll_add_agg(hll_hash_bigint(id))) AS card,
       ea_bounds(NULL, g, count(*)) AS bounds
FROM ea_rows WHERE id <= (SELECT last_id FROM ea_read) GROUP BY g;
CREATE VIEW ea_check_global AS
SELECT count(s.g) AS groups, count(e.g) AS expected,
       count(*) FILTER (WHERE s.n = e.n) AS same_n,
       count(*) FILTER (WHERE s.card = e.card) AS same_hll,
       count(*) FILTER (WHERE ea_in(s.p95, e.bounds, 2)) AS p95_ok
FROM ea_global s FULL JOIN ea_expected_global e USING (g);
CREATE VIEW ea_watermark AS
SELECT watermark FROM streaming.streams WHERE name = 'ea_append';

-- core aggregates need the same: the input collation (min and max of text
-- compare by it) and fn_expr (array_append learns its argument types from
-- it); by-reference states are stored as they are, toasted or not
CREATE AGGREGATE ea_collect(anycompatible) (sfunc = array_append, stype = anycompatiblearray,
    combinefunc = array_cat);
SELECT streaming.create_stream('ea_core',
    $$SELECT g, min(id::text) AS lo, max(id::text COLLATE "C") AS hi, ea_collect(id) AS ids
      FROM ea_src GROUP BY g$$,
    output_mode => 'complete', start => false);
CREATE VIEW ea_check_core AS
SELECT count(s.g) AS groups, count(e.g) AS expected,
       count(*) FILTER (WHERE s.lo = e.lo AND s.hi = e.hi) AS same_min_max,
       count(*) FILTER (WHERE (SELECT array_agg(x ORDER BY x) FROM unnest(s.ids) x) = e.ids) AS same_ids
FROM ea_core s
FULL JOIN (SELECT g, min(id::text) AS lo, max(id::text COLLATE "C") AS hi, array_agg(id::bigint ORDER BY id) AS ids
           FROM ea_rows WHERE id <= (SELECT last_id FROM ea_read) GROUP BY g) e USING (g);

-- Three batches: windows that span batches combine their stored states.
-- In append mode the batch after a data batch, without data, writes the
-- windows that the data batch's watermark closed.
CREATE FUNCTION ea_batch(upto int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM ea_produce(last_id + 1, upto) FROM ea_read WHERE last_id < upto;
    UPDATE ea_read SET last_id = upto;
    PERFORM streaming.run_batch(s)
    FROM unnest(ARRAY['ea_update', 'ea_complete', 'ea_append', 'ea_append', 'ea_global', 'ea_core']) s;
END
$$;
CREATE VIEW ea_checks AS
SELECT 'update' AS mode, NULL AS closed_at, * FROM ea_check('ea_update')
UNION ALL
SELECT 'complete', NULL, * FROM ea_check('ea_complete')
UNION ALL
SELECT 'append', to_char(w.watermark AT TIME ZONE 'UTC', 'HH24:MI'), c.*
FROM ea_watermark w, ea_check('ea_append', w.watermark) c;
SELECT ea_batch(1000);
SELECT * FROM ea_checks;
SELECT * FROM ea_check_global;
SELECT * FROM ea_check_core;
SELECT ea_batch(2200);
SELECT * FROM ea_checks;
SELECT * FROM ea_check_global;
SELECT * FROM ea_check_core;
SELECT ea_batch(3000);
SELECT * FROM ea_checks;
SELECT * FROM ea_check_global;
SELECT * FROM ea_check_core;
SELECT batch_id, num_input_rows, num_output_rows, num_state_rows FROM streaming.progress
WHERE stream = 'ea_append' ORDER BY batch_id;
-- the states went through the state table compressed or out of line
SELECT format('streaming.state_%s', id) AS state FROM streaming.stream_defs WHERE name = 'ea_global' \gset
SELECT count(*) AS states, count(*) FILTER (WHERE pg_column_compression(state_2) IS NOT NULL
                                             OR pg_column_size(state_2) < octet_length(state_2)) AS toasted
FROM :state;

--
-- tdigest before 1.4.4 (Debian 12 has 1.4.0) writes past a digest's buffer
-- when it combines digests of different compressions, as a stream would
-- with the states of different batches: its compression must be a
-- constant, and aggregates of digests are refused
--
SELECT extversion FROM pg_extension WHERE extname = 'tdigest';
SELECT streaming.create_stream('ea_bad', 'SELECT g, tdigest_percentile(v, 100 + g, 0.95) AS p FROM ea_src GROUP BY g',
    output_mode => 'update', start => false);
SELECT streaming.create_stream('ea_bad', 'SELECT g, tdigest_percentile(v::text::tdigest, 0.95) AS p FROM ea_src GROUP BY g',
    output_mode => 'update', start => false);
SELECT to_regclass('ea_bad') AS no_sink_left, (SELECT count(*) FROM streaming.streams WHERE name = 'ea_bad') AS no_stream_left;
-- a constant expression is a constant
SELECT streaming.create_stream('ea_const', 'SELECT g, tdigest(v, 50 * 2) AS d FROM ea_src GROUP BY g',
    output_mode => 'update', start => false);

DROP VIEW ea_checks, ea_check_global, ea_check_core, ea_expected, ea_expected_global, ea_watermark;
SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.streams
WHERE name LIKE 'ea\_%' ORDER BY name;
SELECT streaming.drop_source('ea_src');
DROP FUNCTION ea_check(regclass, timestamptz), ea_in(float8, float8[], int),
    ea_bounds(timestamptz, int, bigint), ea_fraction(float8, bigint, int), ea_group(timestamptz, int), ea_tolerance(float8, bigint), ea_produce(int, int), ea_batch(int);
DROP AGGREGATE ea_collect(anycompatible);
DROP TABLE ea_rows, ea_read;
DROP EXTENSION tdigest;
DROP EXTENSION hll;
