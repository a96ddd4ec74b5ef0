--
-- cdc: Debezium change events (SPEC 2.1.2) into output_mode 'upsert'
-- sinks (SPEC 3.2).  A captured table is changed here by plain DML (a
-- snapshot, inserts, updates, deletes of 40 keys), each change recorded as
-- Debezium records it (before, after, op, ts_ms); the change log goes to
-- Kafka as JSON (with and without the schema/payload wrapper, decimals in
-- base64 with the wrapper) and as Avro (test/avro_encode.py), with
-- tombstones after deletes, and the streams' sinks must equal the captured
-- table at the end, in several batches.  Then: bad change events (dead
-- letters), upsert without CDC (the batch's last row per key wins, NULL
-- keys equal), and the refusals of upsert.  The same under kill -9 of the
-- worker is test/t/022_avro_cdc.pl.
--
-- Environment: KAFKA_BOOTSTRAP, SCHEMA_REGISTRY, KAFKA_RUN_ID (optional).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\getenv registry SCHEMA_REGISTRY
\i test/regress_helpers.sql
SET stm.run = :'run';
SELECT format('{"url": "%s"}', :'registry') AS reg \gset

--
-- The captured table and its change log, made by PostgreSQL itself
--
CREATE TABLE cdc_captured (id int PRIMARY KEY, name text, balance numeric(10,2));
CREATE TABLE cdc_log (seq int PRIMARY KEY, op text, before jsonb, after jsonb);
DO $$
DECLARE
    k int;
    b jsonb;
    a jsonb;
    o text;
BEGIN
    FOR s IN 1..500 LOOP
        k := (s * 37) % 40 + 1;
        SELECT to_jsonb(c) INTO b FROM cdc_captured c WHERE id = k;
        IF b IS NULL THEN
            o := CASE WHEN s <= 25 THEN 'r' ELSE 'c' END;
            INSERT INTO cdc_captured VALUES (k, 'n' || s, s * 1.25)
                RETURNING to_jsonb(cdc_captured) INTO a;
        ELSIF s % 4 = 0 THEN
            o := 'd';
            a := NULL;
            DELETE FROM cdc_captured WHERE id = k;
        ELSE
            o := 'u';
            UPDATE cdc_captured SET name = CASE WHEN s % 7 = 0 THEN NULL ELSE 'n' || s END,
                                    balance = balance - s * 0.37
            WHERE id = k RETURNING to_jsonb(cdc_captured) INTO a;
        END IF;
        INSERT INTO cdc_log VALUES (s, o, b, a);
    END LOOP;
END $$;
SELECT op, count(*) FROM cdc_log GROUP BY op ORDER BY op;
SELECT count(*) AS captured_rows, count(*) FILTER (WHERE name IS NULL) AS null_names,
       count(*) FILTER (WHERE balance < 0) AS negative FROM cdc_captured;

-- Debezium's JSON: every third event in Kafka Connect's schema/payload
-- wrapper, where a decimal is the base64 of its unscaled two's complement
CREATE FUNCTION cdc_wrapped(r jsonb) RETURNS jsonb LANGUAGE sql IMMUTABLE
    RETURN CASE WHEN r IS NULL THEN NULL ELSE jsonb_set(r, '{balance}',
        to_jsonb(encode(int8send((100 * (r->>'balance')::numeric)::int8), 'base64'))) END;
CREATE VIEW cdc_json_events AS
SELECT seq, CASE WHEN seq % 3 = 0 THEN
    jsonb_build_object('schema', '{"type": "struct", "optional": false, "name": "db.public.customers.Envelope", "fields": [
        {"type": "struct", "optional": true, "field": "before", "name": "db.public.customers.Value", "fields": [
            {"type": "int32", "optional": false, "field": "id"},
            {"type": "string", "optional": true, "field": "name"},
            {"type": "bytes", "optional": true, "field": "balance", "name": "org.apache.kafka.connect.data.Decimal",
             "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}}]},
        {"type": "struct", "optional": true, "field": "after", "name": "db.public.customers.Value", "fields": [
            {"type": "int32", "optional": false, "field": "id"},
            {"type": "string", "optional": true, "field": "name"},
            {"type": "bytes", "optional": true, "field": "balance", "name": "org.apache.kafka.connect.data.Decimal",
             "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}}]},
        {"type": "string", "optional": false, "field": "op"},
        {"type": "int64", "optional": true, "field": "ts_ms"}]}'::jsonb,
        'payload', jsonb_build_object('before', cdc_wrapped(before), 'after', cdc_wrapped(after),
                                      'op', op, 'ts_ms', 1700000000000 + seq * 1000,
                                      'source', '{"db": "shop", "table": "customers"}'::jsonb))
    ELSE jsonb_build_object('before', before, 'after', after, 'op', op,
                            'ts_ms', 1700000000000 + seq * 1000,
                            'source', '{"db": "shop", "table": "customers"}'::jsonb)
    END AS event
FROM cdc_log;

\set json_topic 'cdc_json' :run
SELECT stm_produce(:'json_topic', 'SELECT event FROM cdc_json_events WHERE seq <= 250 ORDER BY seq');
-- a tombstone (the NULL value Debezium sends after a delete) is skipped
\! printf 'tombstone:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_json$KAFKA_RUN_ID" -p 0 -K: -Z
SELECT stm_produce(:'json_topic', 'SELECT event FROM cdc_json_events WHERE seq > 250 ORDER BY seq');
\! printf 'tombstone:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_json$KAFKA_RUN_ID" -p 0 -K: -Z

SELECT streaming.create_kafka_source('cdc_json_src', :'bs', topics => ARRAY[:'json_topic'],
    starting_offsets => 'earliest', envelope => 'debezium', max_offsets_per_trigger => 60,
    columns => 'id int, name text, balance numeric(10,2)');
\d cdc_json_src
-- the replica: upserts and deletes by id, in source order, 60 events a batch
SELECT streaming.create_stream('cdc_json_replica', 'SELECT id, name, balance FROM cdc_json_src',
    output_mode => 'upsert', key_columns => ARRAY['id'], start => false);
\d cdc_json_replica
-- the change stream itself, appended: every event once, tombstones skipped
SELECT streaming.create_stream('cdc_json_changes',
    'SELECT id, name, balance, cdc_op, cdc_ts, kafka_offset FROM cdc_json_src', start => false);
SELECT count(*) AS batches FROM (SELECT streaming.run_batch('cdc_json_replica') b
                                 FROM generate_series(1, 20)) r WHERE b IS NOT NULL;
SELECT count(*) AS batches FROM (SELECT streaming.run_batch('cdc_json_changes') b
                                 FROM generate_series(1, 20)) r WHERE b IS NOT NULL;
CREATE VIEW cdc_differences AS
SELECT 'json' AS replica,
       (SELECT count(*) FROM (TABLE cdc_captured EXCEPT SELECT id, name, balance FROM cdc_json_replica) d) AS missing,
       (SELECT count(*) FROM (SELECT id, name, balance FROM cdc_json_replica EXCEPT TABLE cdc_captured) d) AS extra,
       (SELECT count(*) FROM cdc_json_replica) AS rows;
SELECT * FROM cdc_differences;
SELECT count(*) AS events, count(*) FILTER (WHERE c.cdc_op = l.op AND c.cdc_ts = to_timestamp(1700000000 + l.seq)
                                            AND c.id = (coalesce(l.after, l.before)->>'id')::int
                                            AND c.balance IS NOT DISTINCT FROM (coalesce(l.after, l.before)->>'balance')::numeric) AS as_logged
FROM cdc_json_changes c JOIN cdc_log l ON l.seq = c.kafka_offset + 1 - (c.kafka_offset > 250)::int;
SELECT count(*) AS dead_letters FROM streaming.dead_letters WHERE stream LIKE 'cdc_json%';
SELECT num_input_rows, num_output_rows, num_bad_rows FROM streaming.progress
WHERE stream = 'cdc_json_replica' ORDER BY batch_id DESC LIMIT 1;

--
-- The same change log in Avro (Debezium's Avro converter: the envelope a
-- record, before and after unions of null and the row's record, decimals
-- as Avro decimals), columns from the registry's schema
--
\set avro_topic 'cdc_avro' :run
\copy (SELECT jsonb_build_object('before', before, 'after', after, 'op', op, 'ts_ms', 1700000000000 + seq * 1000, 'source', '{"db": "shop", "table": "customers"}'::jsonb) FROM cdc_log WHERE seq <= 300 ORDER BY seq) TO PROGRAM 'test/avro_produce.sh "cdc_avro$KAFKA_RUN_ID" test/avro/debezium_customers.avsc'
\! printf 'tombstone:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_avro$KAFKA_RUN_ID" -p 0 -K: -Z
\copy (SELECT jsonb_build_object('before', before, 'after', after, 'op', op, 'ts_ms', 1700000000000 + seq * 1000, 'source', '{"db": "shop", "table": "customers"}'::jsonb) FROM cdc_log WHERE seq > 300 ORDER BY seq) TO PROGRAM 'test/avro_produce.sh "cdc_avro$KAFKA_RUN_ID" test/avro/debezium_customers.avsc'
SELECT streaming.create_kafka_source('cdc_avro_src', :'bs', topics => ARRAY[:'avro_topic'],
    starting_offsets => 'earliest', envelope => 'debezium', format => 'avro',
    schema_registry => :'reg', max_offsets_per_trigger => 70);
\d cdc_avro_src
SELECT streaming.create_stream('cdc_avro_replica', 'SELECT id, name, balance FROM cdc_avro_src',
    output_mode => 'upsert', key_columns => ARRAY['id'], start => false);
SELECT count(*) AS batches FROM (SELECT streaming.run_batch('cdc_avro_replica') b
                                 FROM generate_series(1, 20)) r WHERE b IS NOT NULL;
SELECT 'avro' AS replica,
       (SELECT count(*) FROM (TABLE cdc_captured EXCEPT SELECT id, name, balance FROM cdc_avro_replica) d) AS missing,
       (SELECT count(*) FROM (SELECT id, name, balance FROM cdc_avro_replica EXCEPT TABLE cdc_captured) d) AS extra,
       (SELECT count(*) FROM cdc_avro_replica) AS rows;
SELECT count(*) AS dead_letters FROM streaming.dead_letters WHERE stream = 'cdc_avro_replica';

--
-- Bad change events (SPEC 5) are dead letters; the others still apply
--
\set bad_topic 'cdc_bad' :run
\! printf '%s\n' '{"before": null, "after": {"id": 1, "name": "one", "balance": 1}, "op": "c", "ts_ms": 1}' '{"after": {"id": 2}, "ts_ms": 2}' '{"before": null, "after": {"id": 3}, "op": "x", "ts_ms": 3}' '{"before": null, "after": {"id": 4' '{"before": null, "after": null, "op": "d", "ts_ms": 5}' '[1, 2]' '{"schema": {"type": "struct", "fields": []}, "payload": {"after": {"id": 7}, "op": "c", "ts_ms": "soon"}}' '{"before": {"id": 1}, "after": null, "op": "d", "ts_ms": 8}' '{"before": null, "after": {"id": 9, "name": "nine"}, "op": "r", "ts_ms": 9}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_bad$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('cdc_bad_src', :'bs', topics => ARRAY[:'bad_topic'],
    starting_offsets => 'earliest', envelope => 'debezium', columns => 'id int, name text, balance numeric');
SELECT streaming.create_stream('cdc_bad_replica', 'SELECT id, name, balance FROM cdc_bad_src',
    output_mode => 'upsert', key_columns => ARRAY['id'], start => false);
SELECT streaming.run_batch('cdc_bad_replica') IS NOT NULL AS ran;
SELECT * FROM cdc_bad_replica ORDER BY id;
SELECT streaming.create_stream('cdc_bad_changes', 'SELECT id, cdc_op, cdc_ts, kafka_offset FROM cdc_bad_src', start => false);
SELECT streaming.run_batch('cdc_bad_changes') IS NOT NULL AS ran;
SELECT * FROM cdc_bad_changes ORDER BY kafka_offset;
SELECT (position->>'offset')::int AS "offset", stm_strip(error) AS error, sqlstate
FROM streaming.dead_letters WHERE stream = 'cdc_bad_replica' ORDER BY 1;

--
-- Events of odd shapes: the common one is taken apart by the lexer alone,
-- any other by the walk (test builds check that the two agree on every
-- event the fast way takes); either way the same rows
--
\set odd_topic 'cdc_odd' :run
\! printf '%s\n' '{"before": null, "after": {"id": 1, "doc": {"a": 1}, "flag": true, "name": "x"}, "op": "c", "ts_ms": 1}' '{"before": null, "after": {"id": 2, "doc": "s", "flag": false, "name": "two", "name": "dup"}, "op": "c", "ts_ms": null, "source": {"db": "d", "n": 1}}' '{"after": {"id": 3, "doc": 3.5, "flag": null, "other": 1}, "op": 5, "op": "u", "ts_ms": 3, "transaction": null}' '{"before": null, "after": {"id": 4, "name": "a\"b"}, "op": "c", "ts_ms": 4}' '{"before": {"id": 2, "name": "gone"}, "after": null, "op": "d", "ts_ms": 5, "source": {"nested": {"x": 1}}}' '{"before": null, "after": {"id": 6, "doc": [1, 2], "name": "six"}, "op": "r", "ts_ms": 6, "extra": [1]}' '{"after": {"id": 7, "name": "seven"}, "after": {"id": 7, "flag": true}, "op": "c"}' ' { "op" : "c" , "ts_ms" : 8 , "after" : { "id" : 8 , "name" : "ei\u0067ht" } } ' '{"before": {"id": 9}, "after": {"id": 9, "name": "nine", "doc": null}, "op": "u", "ts_ms": 9}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_odd$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('cdc_odd_src', :'bs', topics => ARRAY[:'odd_topic'],
    starting_offsets => 'earliest', envelope => 'debezium', columns => 'id int, doc jsonb, flag boolean, name text');
SELECT streaming.create_stream('cdc_odd_changes', 'SELECT id, doc, flag, name, cdc_op, cdc_ts, kafka_offset FROM cdc_odd_src', start => false);
SELECT streaming.run_batch('cdc_odd_changes') IS NOT NULL AS ran;
SELECT * FROM cdc_odd_changes ORDER BY kafka_offset;
SELECT count(*) AS dead_letters FROM streaming.dead_letters WHERE stream = 'cdc_odd_changes';

--
-- Upsert without CDC: the last row of a key in the batch wins, in
-- partition order; NULL keys are equal (UNIQUE NULLS NOT DISTINCT)
--
\set up_topic 'cdc_upsert' :run
\! printf '%s\n' '{"k": 1, "v": "a"}' '{"k": 2, "v": "b"}' '{"k": 1, "v": "c"}' '{"k": null, "v": "n1"}' '{"k": null, "v": "n2"}' '{"k": 2, "v": null}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_upsert$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('cdc_up_src', :'bs', topics => ARRAY[:'up_topic'],
    starting_offsets => 'earliest', columns => 'k int, v text');
SELECT streaming.create_stream('cdc_up', 'SELECT k, v, kafka_offset FROM cdc_up_src',
    output_mode => 'upsert', key_columns => ARRAY['k'], start => false);
SELECT streaming.run_batch('cdc_up') IS NOT NULL AS ran;
SELECT * FROM cdc_up ORDER BY k NULLS LAST;
-- a second batch replaces what the first wrote; a row with no cdc_op never deletes
\! printf '%s\n' '{"k": 1, "v": "d"}' '{"k": 3, "v": "e"}' '{"k": null, "v": "n3"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "cdc_upsert$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('cdc_up') IS NOT NULL AS ran;
SELECT * FROM cdc_up ORDER BY k NULLS LAST;
-- two key columns
SELECT streaming.create_stream('cdc_up2', 'SELECT k, v IS NULL AS no_v, kafka_offset FROM cdc_up_src',
    output_mode => 'upsert', key_columns => ARRAY['k', 'no_v'], start => false);
SELECT streaming.run_batch('cdc_up2') IS NOT NULL AS ran;
SELECT * FROM cdc_up2 ORDER BY k NULLS LAST, no_v;

--
-- Refusals (SPEC 3.2): each leaves nothing behind
--
SELECT stm_error($$SELECT streaming.create_stream('cdc_no', 'SELECT k, v FROM cdc_up_src', output_mode => 'upsert', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('cdc_no', 'SELECT k, count(*) FROM cdc_up_src GROUP BY k', output_mode => 'upsert', key_columns => ARRAY['k'], start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('cdc_no', 'SELECT k, v FROM cdc_up_src', key_columns => ARRAY['k'], start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('cdc_no', 'SELECT k, v FROM cdc_up_src', output_mode => 'upsert', key_columns => ARRAY['nope'], start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('cdc_no', 'SELECT k, v FROM cdc_up_src', output_mode => 'upsert', key_columns => ARRAY[]::text[], start => false)$$);
SELECT stm_error($$SELECT streaming.create_kafka_source('cdc_no_src', 'b:1', topics => ARRAY['t'], envelope => 'maxwell', columns => 'a int')$$);
SELECT stm_error($$SELECT streaming.create_kafka_source('cdc_no_src', 'b:1', topics => ARRAY['t'], envelope => 'debezium', format => 'csv', columns => 'a int')$$);
SELECT stm_error($$SELECT streaming.create_kafka_source('cdc_no_src', 'b:1', topics => ARRAY['t'], envelope => 'debezium', columns => 'a int, cdc_op text')$$);
SELECT count(*) AS left_behind FROM streaming.stream_defs WHERE name = 'cdc_no';
SELECT count(*) AS left_behind FROM streaming.sources WHERE name = 'cdc_no_src';
SELECT to_regclass('cdc_no') AS left_behind;

-- clean up
DROP VIEW cdc_differences;
SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.streams ORDER BY name;
SELECT streaming.drop_source(name) FROM streaming.sources ORDER BY name;
DROP VIEW cdc_json_events;
DROP FUNCTION cdc_wrapped(jsonb);
DROP TABLE cdc_captured, cdc_log;
DROP FUNCTION stm_error(text), stm_strip(text);
DROP FUNCTION stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
