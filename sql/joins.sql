--
-- joins: stream queries that read tables besides their source (SPEC 3.5),
-- run with run_batch.  Every join form is compared, after each batch, with
-- the same SQL over the same rows kept in a plain table (jn_orders_read:
-- the orders read so far), EXCEPT ALL both ways.
--
-- Environment: KAFKA_BOOTSTRAP (also in the server's environment),
-- KAFKA_RUN_ID (optional topic suffix).
--
\i test/regress_helpers.sql
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET jn.run = :'run';

-- dimensions: customers (some orders have none), price bands, a view and
-- a materialized view over them
CREATE TABLE jn_customers (id int PRIMARY KEY, name text, country text);
INSERT INTO jn_customers SELECT g, 'customer ' || g, (ARRAY['de', 'fr', 'it'])[g % 3 + 1]
FROM generate_series(1, 40) g;
CREATE TABLE jn_bands (lo numeric, hi numeric, band text);
INSERT INTO jn_bands VALUES (0, 25, 'small'), (25, 75, 'medium'), (75, 1000, 'large');
CREATE VIEW jn_customer_view AS SELECT id, upper(name) AS shout, country FROM jn_customers;
CREATE MATERIALIZED VIEW jn_country_mv AS
SELECT country, count(*) AS customers FROM jn_customers GROUP BY country;
CREATE TABLE jn_vip (customer int);
INSERT INTO jn_vip VALUES (3), (5), (7), (44);

-- the orders, in a table and, part by part, in a topic; customers 41..50 are unknown
CREATE TABLE jn_orders AS
SELECT g AS id, 1 + (g * 7) % 50 AS customer, ((g * 37) % 1000 / 10.0)::numeric(10,1) AS amount,
       timestamptz '2024-01-01 10:00:00+00' + g * interval '9 seconds' AS ts
FROM generate_series(1, 2000) g;
CREATE TABLE jn_orders_read (LIKE jn_orders);
CREATE FUNCTION jn_send(lo int, hi int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM stm_produce('jn_orders' || current_setting('jn.run'),
                        format('SELECT row_to_json(o) FROM jn_orders o WHERE id BETWEEN %s AND %s ORDER BY id', lo, hi));
    INSERT INTO jn_orders_read SELECT * FROM jn_orders WHERE id BETWEEN lo AND hi;
END
$$;
\set t jn_orders:run
SELECT jn_send(1, 800);
SELECT streaming.create_kafka_source('jn_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest',
    columns => 'id bigint, customer int, amount numeric(10,1), ts timestamptz');

--
-- every join form, each a stream and the same SQL over jn_orders_read
--
CREATE TABLE jn_forms (name text, query text, mode text DEFAULT 'append', extra text DEFAULT '');
INSERT INTO jn_forms (name, query) VALUES
 ('jn_inner', $$SELECT o.id, o.amount, c.name, c.country FROM %s o JOIN jn_customers c ON c.id = o.customer$$),
 ('jn_left', $$SELECT o.id, c.name FROM %s o LEFT JOIN jn_customers c ON c.id = o.customer$$),
 ('jn_right', $$SELECT o.id, c.country FROM jn_customers c RIGHT JOIN %s o ON c.id = o.customer$$),
 ('jn_range', $$SELECT o.id, b.band FROM %s o JOIN jn_bands b ON o.amount >= b.lo AND o.amount < b.hi$$),
 ('jn_expr', $$SELECT o.id, c.name FROM %s o JOIN jn_customers c ON c.id = mod(o.customer, 20) + 1 AND c.country <> 'it'$$),
 ('jn_using', $$SELECT id, customer, amount FROM %s JOIN (SELECT id AS customer FROM jn_customers) c USING (customer)$$),
 ('jn_exists', $$SELECT o.id FROM %s o WHERE EXISTS (SELECT 1 FROM jn_vip v WHERE v.customer = o.customer)$$),
 ('jn_not_exists', $$SELECT o.id FROM %s o WHERE NOT EXISTS (SELECT 1 FROM jn_customers c WHERE c.id = o.customer)$$),
 ('jn_in', $$SELECT o.id, o.customer FROM %s o WHERE o.customer IN (SELECT customer FROM jn_vip) AND o.amount > 10$$),
 ('jn_scalar', $$SELECT o.id, (SELECT c.country FROM jn_customers c WHERE c.id = o.customer) AS country,
                        o.amount > (SELECT avg(lo) FROM jn_bands) AS above FROM %s o$$),
 ('jn_lateral', $$SELECT o.id, l.band FROM %s o, LATERAL (SELECT band FROM jn_bands b WHERE b.lo <= o.amount ORDER BY lo DESC LIMIT 1) l$$),
 ('jn_cte', $$WITH big AS (SELECT id FROM jn_customers WHERE id > 20) SELECT o.id FROM %s o JOIN big ON big.id = o.customer$$),
 ('jn_views', $$SELECT o.id, v.shout, m.customers FROM %s o JOIN jn_customer_view v ON v.id = o.customer
                   JOIN jn_country_mv m ON m.country = v.country$$);
-- an aggregate over a join: the joined rows are its input
INSERT INTO jn_forms VALUES
 ('jn_agg_update', $$SELECT c.country, count(*) AS n, sum(o.amount) AS total FROM %s o JOIN jn_customers c ON c.id = o.customer GROUP BY c.country$$,
  'update'),
 ('jn_agg_left', $$SELECT coalesce(c.country, '?') AS country, count(c.id) AS known, count(*) AS n FROM %s o LEFT JOIN jn_customers c ON c.id = o.customer GROUP BY coalesce(c.country, '?')$$,
  'complete'),
 ('jn_agg_sub', $$SELECT (SELECT band FROM jn_bands b WHERE o.amount >= b.lo AND o.amount < b.hi) AS band, max(o.id) AS last FROM %s o
                 WHERE o.customer IN (SELECT id FROM jn_customers WHERE country = 'de') GROUP BY 1$$,
  'update');
SELECT streaming.create_stream(name, format(query, 'jn_src'), output_mode => mode, start => false)
FROM jn_forms ORDER BY name;
-- a window over a join, append mode with a watermark: the event time is the source's
SELECT streaming.create_stream('jn_window',
    $$SELECT streaming.window_start() AS ws, c.country, count(*) AS n, sum(o.amount) AS total
      FROM jn_src o JOIN jn_customers c ON c.id = o.customer
      GROUP BY streaming.tumble(o.ts, '10 minutes'), c.country$$,
    output_mode => 'append', watermark => '5 minutes', start => false);
CREATE VIEW jn_window_expected AS
SELECT date_bin('10 minutes', o.ts, 'epoch') AS ws, c.country, count(*) AS n, sum(o.amount) AS total
FROM jn_orders_read o JOIN jn_customers c ON c.id = o.customer
GROUP BY 1, 2
-- the windows the watermark (max event time - 5 minutes) has closed
HAVING date_bin('10 minutes', o.ts, 'epoch') + interval '10 minutes'
       <= (SELECT max(ts) - interval '5 minutes' FROM jn_orders_read);

-- the expected rows of each form: the same SQL over the orders read so far
SELECT format('CREATE VIEW %I AS %s', name || '_expected', format(query, 'jn_orders_read'))
FROM jn_forms ORDER BY name \gexec

CREATE FUNCTION jn_check() RETURNS TABLE (stream text, batches int, missing_from_expected bigint,
                                          missing_from_sink bigint, rows bigint)
LANGUAGE sql AS $$
    SELECT stream, batches, missing_from_expected, missing_from_sink, rows
    FROM stm_check(ARRAY(SELECT name FROM jn_forms ORDER BY name) || ARRAY['jn_window'])
$$;
SELECT * FROM jn_check();

-- the batch's plan is PostgreSQL's: a join the planner chose, not one written by hand
SELECT count(*) > 0 AS left_join_nulls FROM jn_left WHERE name IS NULL;

-- a second batch: the same, over every order read so far
SELECT jn_send(801, 1500);
SELECT * FROM jn_check();

--
-- a table changed between batches affects the batches after it only (the
-- batch's snapshot), and never rewrites earlier results
--
CREATE TABLE jn_tier (customer int PRIMARY KEY, tier text);
INSERT INTO jn_tier SELECT g, 'bronze' FROM generate_series(1, 40) g;
SELECT streaming.create_stream('jn_tiered', 'SELECT o.id, t.tier FROM jn_src o JOIN jn_tier t ON t.customer = o.customer',
    start => false);
SELECT streaming.create_stream('jn_tier_count',
    'SELECT t.tier, count(*) AS n FROM jn_src o LEFT JOIN jn_tier t ON t.customer = o.customer GROUP BY t.tier',
    output_mode => 'update', start => false);
SELECT streaming.run_batch('jn_tiered'), streaming.run_batch('jn_tier_count');
UPDATE jn_tier SET tier = 'gold' WHERE customer <= 10;
DELETE FROM jn_tier WHERE customer = 11;
INSERT INTO jn_tier VALUES (45, 'new');
SELECT jn_send(1501, 1600);
SELECT streaming.run_batch('jn_tiered'), streaming.run_batch('jn_tier_count');
-- what each batch saw: orders up to 1500 with the old tiers, the rest with the new
CREATE TEMP TABLE jn_tier_old AS SELECT g AS customer, 'bronze' AS tier FROM generate_series(1, 40) g;
CREATE TEMP VIEW jn_tiered_expected AS
SELECT o.id, t.tier FROM jn_orders_read o JOIN jn_tier_old t ON t.customer = o.customer WHERE o.id <= 1500
UNION ALL
SELECT o.id, t.tier FROM jn_orders_read o JOIN jn_tier t ON t.customer = o.customer WHERE o.id > 1500;
SELECT (SELECT count(*) FROM (TABLE jn_tiered EXCEPT ALL TABLE jn_tiered_expected) d) AS missing_from_expected,
       (SELECT count(*) FROM (TABLE jn_tiered_expected EXCEPT ALL TABLE jn_tiered) d) AS missing_from_sink,
       (SELECT count(*) FROM jn_tiered WHERE tier = 'gold') > 0 AS later_rows_see_the_change,
       (SELECT count(*) FROM jn_tiered WHERE tier <> 'bronze' AND id <= 1500) AS earlier_rows_rewritten;
SELECT tier, n FROM jn_tier_count ORDER BY tier NULLS FIRST;
SELECT t.tier, count(*) AS n
FROM (SELECT o.id, coalesce(old.tier, NULL) AS tier FROM jn_orders_read o LEFT JOIN jn_tier_old old ON old.customer = o.customer WHERE o.id <= 1500
      UNION ALL
      SELECT o.id, cur.tier FROM jn_orders_read o LEFT JOIN jn_tier cur ON cur.customer = o.customer WHERE o.id > 1500) t
GROUP BY t.tier ORDER BY t.tier NULLS FIRST;

--
-- what the stream's owner may read: SELECT on every table, at create time
-- and in every batch (as the owner)
--
CREATE ROLE regress_jn_user;
GRANT CREATE ON SCHEMA public TO regress_jn_user;
GRANT SELECT ON jn_src TO regress_jn_user;
GRANT SELECT ON jn_bands TO regress_jn_user;
SET ROLE regress_jn_user;
SELECT streaming.create_stream('jn_denied', 'SELECT o.id, c.name FROM jn_src o JOIN jn_customers c ON c.id = o.customer', start => false);
SELECT streaming.create_stream('jn_user', 'SELECT o.id, b.band FROM jn_src o JOIN jn_bands b ON o.amount >= b.lo AND o.amount < b.hi', start => false);
SELECT streaming.run_batch('jn_user');
SELECT count(*) FROM jn_user;
RESET ROLE;
REVOKE SELECT ON jn_bands FROM regress_jn_user;
SELECT jn_send(1501, 1600);
SELECT streaming.run_batch('jn_user');

--
-- a table dropped or altered incompatibly fails the batch, with a clear
-- error; the batch is retried like any failed batch, and goes through
-- once the table is back
--
CREATE TABLE jn_extra (id int, label text);
INSERT INTO jn_extra SELECT g, 'label ' || g FROM generate_series(1, 50) g;
SELECT streaming.create_stream('jn_alter', 'SELECT o.id, e.label FROM jn_src o JOIN jn_extra e ON e.id = o.customer', start => false);
SELECT streaming.run_batch('jn_alter') IS NOT NULL AS ran;
SELECT jn_send(1601, 1700);
ALTER TABLE jn_extra DROP COLUMN label;
SELECT streaming.run_batch('jn_alter');
ALTER TABLE jn_extra ADD COLUMN label text DEFAULT 'again';
SELECT streaming.run_batch('jn_alter') IS NOT NULL AS ran;
SELECT jn_send(1701, 1800);
DROP TABLE jn_extra;
SELECT streaming.run_batch('jn_alter');
CREATE TABLE jn_extra (id int, label text);
INSERT INTO jn_extra SELECT g, 'new ' || g FROM generate_series(1, 50) g;
SELECT streaming.run_batch('jn_alter') IS NOT NULL AS ran;
SELECT count(*) AS rows, count(DISTINCT id) AS ids, count(*) FILTER (WHERE label = 'again') AS again,
       count(*) FILTER (WHERE label LIKE 'new %') AS new FROM jn_alter;
SELECT count(*) AS read FROM jn_orders_read o WHERE o.customer <= 50;

--
-- refused at create time, with what and why
--
SELECT streaming.create_kafka_source('jn_src2', :'bs', topics => ARRAY[:'t'], columns => 'id bigint');
-- (two sources joined are a stream-stream join: stream_joins tests them)
SELECT streaming.create_stream('bad', 'SELECT a.id FROM jn_src a JOIN jn_src2 b ON a.id = b.id JOIN jn_src c ON c.id = a.id', start => false);
SELECT streaming.create_stream('bad', 'SELECT a.id FROM jn_src a JOIN jn_src b ON a.amount > b.amount', start => false);
SELECT streaming.create_stream('bad', 'SELECT c.id FROM jn_customers c WHERE EXISTS (SELECT 1 FROM jn_src o WHERE o.customer = c.id)', start => false);
SELECT streaming.create_stream('bad', 'SELECT o.id FROM (SELECT * FROM jn_src) o JOIN jn_customers c ON c.id = o.customer', start => false);
SELECT streaming.create_stream('bad', 'SELECT o.id FROM jn_customers c LEFT JOIN jn_src o ON c.id = o.customer', start => false);
SELECT streaming.create_stream('bad', 'SELECT o.id FROM jn_src o RIGHT JOIN jn_customers c ON c.id = o.customer', start => false);
SELECT streaming.create_stream('bad', 'SELECT o.id FROM jn_src o FULL JOIN jn_customers c ON c.id = o.customer', start => false);
SELECT streaming.create_stream('bad', 'SELECT c.name FROM jn_customers c', start => false);
SELECT streaming.create_stream('bad', $$SELECT streaming.window_start() AS ws, count(*) AS n FROM jn_src o JOIN jn_orders t ON t.id = o.id
    GROUP BY streaming.tumble(t.ts, '1 minute')$$, start => false);
SELECT streaming.create_stream('bad', $$SELECT c.country, count(*) AS n, (SELECT 1) AS one FROM jn_src o JOIN jn_customers c ON c.id = o.customer
    GROUP BY c.country$$, output_mode => 'update', start => false);
SELECT streaming.create_stream('bad', 'WITH x AS (DELETE FROM jn_bands RETURNING *) SELECT o.id FROM jn_src o', start => false);
-- nothing was left behind
SELECT count(*) AS bad_streams FROM streaming.stream_defs WHERE name = 'bad';
SELECT to_regclass('bad') AS bad_sink;

SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.streams WHERE name LIKE 'jn\_%' ORDER BY name;
SELECT streaming.drop_source('jn_src');
SELECT streaming.drop_source('jn_src2');
DROP OWNED BY regress_jn_user;
DROP ROLE regress_jn_user;
