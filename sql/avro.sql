--
-- avro: format => 'avro' of Kafka sources and sinks with a schema registry
-- (SPEC 2.1.1).  Records are written by Apache Avro's Python library
-- (test/avro_encode.py) in the Confluent wire format: every type of the
-- spec, as declared columns and as columns taken from the registry; a
-- topic whose schema evolves (v1, v2, v3 on one subject, resolved by field
-- name, defaults of the schema the columns came from); records that are
-- not in the wire format, of an unknown id, or that Avro cannot read with
-- their schema (dead letters); the arguments and their errors; the
-- registry's basic_auth, which no other role sees; the Kafka sink in
-- format avro (the schema it registers, the wire format, read back).
-- The registry down and back, and credentials in logs, are in
-- test/t/022_avro_cdc.pl.
--
-- Environment: KAFKA_BOOTSTRAP, SCHEMA_REGISTRY (its URL), KAFKA_RUN_ID
-- (optional suffix of topic names, and so of subjects).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\getenv registry SCHEMA_REGISTRY
\i test/regress_helpers.sql
SET stm.run = :'run';
SET stm.registry = :'registry';
-- messages without the run's suffix and the registry's URL
CREATE FUNCTION av_strip(t text) RETURNS text LANGUAGE sql STABLE
    RETURN replace(stm_strip(t), current_setting('stm.registry'), '<registry>');
CREATE FUNCTION av_error(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || av_strip(SQLERRM);
END $$;
SELECT format('{"url": "%s"}', :'registry') AS reg \gset

--
-- Every type (SPEC 2.1.1)
--
\! test/avro_produce.sh "avro_types$KAFKA_RUN_ID" test/avro/types.avsc < test/avro/types.jsonl
-- without columns: the fields of the subject's latest schema, with the types their values have
SELECT streaming.create_kafka_source('av_types', :'bs', topics => ARRAY['avro_types' || :'run'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg');
\d av_types
SELECT options->>'columns' AS columns, options->'reader_schema_id' IS NOT NULL AS has_reader_schema
FROM streaming.sources WHERE name = 'av_types';
SELECT streaming.create_stream('av_types_all', 'SELECT * FROM av_types', start => false);
SELECT streaming.run_batch('av_types_all') IS NOT NULL AS ran;
\x on
SELECT b, i, l, f, d, s, "by", fx, dec, decfix, u, dt, tm, tmu, ts, tsu, lts, ltsu, en, rec, mp,
       arr, arr_int, n, multi, again, kafka_offset
FROM av_types_all ORDER BY kafka_offset;
\x off

-- declared columns: fields by name in any order, cast to the columns'
-- types; Avro arrays into PostgreSQL arrays; a column no field has is NULL
SELECT streaming.create_kafka_source('av_cast', :'bs', topics => ARRAY['avro_types' || :'run'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg',
    columns => 'arr text[], arr_int int[], i bigint, l numeric, dec float8, f numeric, dt timestamptz, '
               'ts timestamp, en text, rec text, u text, "by" text, b text, nothing int');
SELECT streaming.create_stream('av_cast_all', 'SELECT * FROM av_cast', start => false);
SELECT streaming.run_batch('av_cast_all') IS NOT NULL AS ran;
SELECT arr, arr_int, i, l, dec, f, dt, ts, en, rec, u, "by", b, nothing FROM av_cast_all ORDER BY kafka_offset;
-- columns of primitive fields only (and their unions with null), the other
-- fields skipped: read directly into the columns (test builds also read
-- each record the generic way and compare); the same rows as av_types'
SELECT streaming.create_kafka_source('av_direct', :'bs', topics => ARRAY['avro_types' || :'run'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg',
    columns => 'n bigint, b bool, i int, l bigint, f real, d float8, s text, "by" bytea, fx bytea, '
               'dec numeric(10,3), decfix numeric(28,4), u uuid, dt date, tm time, tmu time, '
               'ts timestamptz, tsu timestamptz, lts timestamp, ltsu timestamp, en text');
SELECT streaming.create_stream('av_direct_all', 'SELECT * FROM av_direct', start => false);
SELECT streaming.run_batch('av_direct_all') IS NOT NULL AS ran;
SELECT count(*) AS rows, count(*) FILTER (WHERE d.r = g.r) AS same
FROM (SELECT kafka_offset, row(b, i, l, f, d, s, "by", fx, dec, decfix, u, dt, tm, tmu, ts, tsu, lts,
                               ltsu, en, n)::text AS r FROM av_direct_all) d
JOIN (SELECT kafka_offset, row(b, i, l, f, d, s, "by", fx, dec, decfix, u, dt, tm, tmu, ts, tsu, lts,
                               ltsu, en, n)::text AS r FROM av_types_all) g USING (kafka_offset);
-- a value its column cannot take is a bad record (SPEC 5): the others go on
SELECT streaming.create_kafka_source('av_small', :'bs', topics => ARRAY['avro_types' || :'run'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg',
    columns => 'i smallint, s varchar(12)');
SELECT streaming.create_stream('av_small_all', 'SELECT i, s, kafka_offset FROM av_small', start => false);
SELECT streaming.run_batch('av_small_all') IS NOT NULL AS ran;
SELECT i, s, kafka_offset FROM av_small_all ORDER BY kafka_offset;
SELECT position, av_strip(error) AS error, sqlstate FROM streaming.dead_letters
WHERE stream = 'av_small_all' ORDER BY position->>'offset';
-- a declared column whose type cannot hold its field is refused at create time
SELECT av_error($$SELECT streaming.create_kafka_source('av_bad_type', '$$ || :'bs' || $$',
    topics => ARRAY['avro_types$$ || :'run' || $$'], format => 'avro', schema_registry => '$$ || :'reg' || $$',
    columns => 'b timestamptz')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_bad_type', '$$ || :'bs' || $$',
    topics => ARRAY['avro_types$$ || :'run' || $$'], format => 'avro', schema_registry => '$$ || :'reg' || $$',
    columns => 'rec int')$$);
SELECT count(*) FROM streaming.sources WHERE name = 'av_bad_type';

--
-- Evolution: v1, v2 and v3 of one subject on one topic (SPEC 2.1.1)
--
\! printf '%s\n' '{"id": 1, "name": "ann"}' '{"id": 2, "name": "bob"}' | test/avro_produce.sh "avro_users$KAFKA_RUN_ID" test/avro/user_v1.avsc
\! printf '%s\n' '{"id": 3, "name": "cy", "email": "cy@example.com", "score": 30}' '{"id": 4, "name": "di", "email": null, "score": 40}' | test/avro_produce.sh "avro_users$KAFKA_RUN_ID" test/avro/user_v2.avsc
-- the columns are v2's (the latest); v1's records get v2's defaults
SELECT streaming.create_kafka_source('av_users', :'bs', topics => ARRAY['avro_users' || :'run'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg');
SELECT options->>'columns' AS columns FROM streaming.sources WHERE name = 'av_users';
-- declared columns: no schema's defaults, missing fields are NULL
SELECT streaming.create_kafka_source('av_users_decl', :'bs', topics => ARRAY['avro_users' || :'run'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg',
    columns => 'name text, score int, id int');
SELECT streaming.create_stream('av_users_all', 'SELECT * FROM av_users', start => false);
SELECT streaming.create_stream('av_users_decl_all', 'SELECT * FROM av_users_decl', start => false);
SELECT streaming.run_batch('av_users_all') IS NOT NULL AS ran;
-- v3 comes after the source: name is gone (NULL: v2 has no default for it), extra is not a column
\! printf '%s\n' '{"id": 5, "email": "ed@example.com", "score": 50, "extra": "x"}' | test/avro_produce.sh "avro_users$KAFKA_RUN_ID" test/avro/user_v3.avsc
SELECT streaming.run_batch('av_users_all') IS NOT NULL AS ran;
SELECT streaming.run_batch('av_users_decl_all') IS NOT NULL AS ran;
SELECT id, name, email, score, kafka_offset FROM av_users_all ORDER BY kafka_offset;
SELECT id, name, score, kafka_offset FROM av_users_decl_all ORDER BY kafka_offset;
-- three writers' schemas, one plan each, nothing set aside
SELECT count(*) FROM streaming.dead_letters WHERE stream IN ('av_users_all', 'av_users_decl_all');

--
-- Bad records (SPEC 5): not the wire format, an unknown id, bytes Avro
-- cannot read with their schema, no value at all
--
\set bad_topic 'avro_bad' :run
\! printf '%s\n' '{"id": 10, "name": "good"}' | test/avro_produce.sh "avro_bad$KAFKA_RUN_ID" test/avro/user_v1.avsc
\! printf '%s\n' 'not avro at all' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "avro_bad$KAFKA_RUN_ID" -p 0
\! printf '%s\n' '{"id": 11, "name": "unknown id"}' | test/avro_produce.sh "avro_bad$KAFKA_RUN_ID" test/avro/user_v1.avsc --id 2147480000
\! printf '%s\n' '{"id": 12, "name": "truncated"}' | test/avro_produce.sh "avro_bad$KAFKA_RUN_ID" test/avro/user_v1.avsc --mangle truncate
\! printf '%s\n' '{"id": 13, "name": "one byte more"}' | test/avro_produce.sh "avro_bad$KAFKA_RUN_ID" test/avro/user_v1.avsc --mangle extra
\! printf '\000\000\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "avro_bad$KAFKA_RUN_ID" -p 0
\! printf 'no value:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "avro_bad$KAFKA_RUN_ID" -p 0 -K: -Z
\! printf '%s\n' '{"id": 14, "name": "good again"}' | test/avro_produce.sh "avro_bad$KAFKA_RUN_ID" test/avro/user_v1.avsc
SELECT streaming.create_kafka_source('av_bad', :'bs', topics => ARRAY[:'bad_topic'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg');
SELECT streaming.create_stream('av_bad_all', 'SELECT id, name, kafka_offset FROM av_bad', start => false);
SELECT streaming.run_batch('av_bad_all') IS NOT NULL AS ran;
SELECT id, name, kafka_offset FROM av_bad_all ORDER BY kafka_offset;
SELECT (position->>'offset')::int AS "offset", av_strip(error) AS error, sqlstate, raw_length
FROM streaming.dead_letters WHERE stream = 'av_bad_all' ORDER BY 1;
SELECT num_input_rows, num_output_rows, num_bad_rows FROM streaming.progress WHERE stream = 'av_bad_all';
-- on_bad_record => 'fail' names the position
SELECT streaming.create_kafka_source('av_bad_fail', :'bs', topics => ARRAY[:'bad_topic'],
    starting_offsets => 'earliest', format => 'avro', schema_registry => :'reg',
    on_bad_record => 'fail');
SELECT streaming.create_stream('av_bad_fail_all', 'SELECT id FROM av_bad_fail', start => false);
SELECT av_error($$SELECT streaming.run_batch('av_bad_fail_all')$$);

--
-- Arguments (SPEC 2.1.1, 5): each error leaves nothing behind
--
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '"http://r:8081"')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '{"url": "ftp://r/x"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '{"url": "http://user:secret@r:8081"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '{"url": "http://r:8081/?x=1"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '{}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '{"url": "http://r:8081", "password": "x"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int', schema_registry => '{"url": "http://r:8081", "basic_auth": "no colon"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], columns => 'a int', schema_registry => '{"url": "http://r:8081"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], key_format => 'json')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], key_format => 'avro')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topic_pattern => 't.*', format => 'avro', schema_registry => '{"url": "http://r:8081"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', columns => 'a int, kafka_key_avro jsonb', key_format => 'avro', schema_registry => '{"url": "http://r:8081"}')$$);
SELECT av_error(format($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['no_such_topic'], format => 'avro', schema_registry => %L)$$, :'reg'));
-- a registry that cannot be reached: an error without columns (08006), a
-- WARNING with them (the records are read once it answers)
SELECT av_error($$SELECT streaming.create_kafka_source('av_arg', 'b:1', topics => ARRAY['t'], format => 'avro', schema_registry => '{"url": "http://127.0.0.1:1"}')$$);
\set VERBOSITY terse
SELECT streaming.create_kafka_source('av_unreachable', :'bs', topics => ARRAY['avro_users' || :'run'],
    starting_offsets => 'earliest', format => 'avro', columns => 'id int',
    schema_registry => '{"url": "http://127.0.0.1:1", "basic_auth": "alice:not-for-mallory"}');
\set VERBOSITY default
SELECT count(*) FROM streaming.sources WHERE name = 'av_arg';
-- a batch that cannot reach the registry fails with class 08 (the worker
-- waits), sets no record aside, and never shows the secret
SELECT streaming.create_stream('av_unreachable_all', 'SELECT id FROM av_unreachable', start => false);
DO $$
BEGIN
    PERFORM streaming.run_batch('av_unreachable_all');
EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE '% %: secret shown: %', SQLSTATE, av_strip(SQLERRM), SQLERRM LIKE '%not-for-mallory%';
END $$;
SELECT count(*) AS dead_letters FROM streaming.dead_letters WHERE stream = 'av_unreachable_all';

--
-- basic_auth is a credential (SPEC 7): only the owner sees the source's options
--
CREATE ROLE regress_av_alice;
CREATE ROLE regress_av_mallory;
GRANT CREATE ON SCHEMA public TO regress_av_alice;
SET ROLE regress_av_alice;
SELECT streaming.create_kafka_source('av_alice', :'bs', topics => ARRAY['avro_users' || :'run'],
    starting_offsets => 'earliest', format => 'avro',
    schema_registry => format('{"url": "%s", "basic_auth": "alice:not-for-mallory"}', :'registry')::jsonb);
SELECT streaming.create_stream('av_alice_all', 'SELECT id, email FROM av_alice', start => false);
SELECT streaming.run_batch('av_alice_all') IS NOT NULL AS ran;
SELECT count(*) FROM av_alice_all;
SELECT options->'schema_registry'->>'basic_auth' AS own_secret FROM streaming.sources;
SET ROLE regress_av_mallory;
SELECT (SELECT count(*) FROM streaming.sources) AS sources,
       (SELECT count(*) FROM streaming.stream_defs) AS stream_defs,
       (SELECT count(*) FROM streaming.streams) AS streams,
       (SELECT count(*) FROM streaming.progress) AS progress;
SELECT av_error($$UPDATE streaming.sources SET options = '{}'$$);
SELECT av_error($$SELECT streaming.drop_source('av_alice')$$);
RESET ROLE;
SELECT streaming.drop_stream('av_alice_all', drop_sink => true);
SELECT streaming.drop_source('av_alice');
REVOKE CREATE ON SCHEMA public FROM regress_av_alice;
DROP ROLE regress_av_alice, regress_av_mallory;

--
-- The Kafka sink in format avro (SPEC 2.1.1): the schema of the output
-- columns registered under <topic>-value (keys under <topic>-key), every
-- message in the wire format with that id; read back by an Avro source
--
SELECT av_error($$SELECT streaming.create_kafka_sink('av_ks', 'b:1', 't', format => 'avro')$$);
SELECT av_error($$SELECT streaming.create_kafka_sink('av_ks', 'b:1', 't', key_format => 'avro')$$);
SELECT av_error($$SELECT streaming.create_kafka_sink('av_ks', 'b:1', 't', key_format => 'xml', schema_registry => '{"url": "http://r:8081"}')$$);
SELECT av_error($$SELECT streaming.create_kafka_sink('av_ks', 'b:1', 't', schema_registry => '{"url": "http://r:8081"}')$$);
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('av_out', :'bs', 'avro_out' || :'run', format => 'avro',
    key_columns => ARRAY['i'], key_format => 'avro', schema_registry => :'reg');
\set VERBOSITY default
-- an output column that is no Avro name is refused
SELECT av_error($$SELECT streaming.create_stream('av_to_kafka', 'SELECT i, s AS "the s" FROM av_types', sink => 'av_out', start => false)$$);
SELECT streaming.create_stream('av_to_kafka',
    'SELECT i, l AS big, dec, decfix::numeric AS any_numeric, ts, lts, dt, tm, s, u, "by", b, f, d, rec, en FROM av_types',
    sink => 'av_out', start => false);
-- the id and schema of each subject's latest version, as the registry has them
\set value_latest `test/avro_encode.py --registry "$SCHEMA_REGISTRY" --latest "avro_out${KAFKA_RUN_ID}-value"`
\set key_latest `test/avro_encode.py --registry "$SCHEMA_REGISTRY" --latest "avro_out${KAFKA_RUN_ID}-key"`
SELECT s.subject, av_strip(s.latest->'schema'->>'namespace' || '.' || (s.latest->'schema'->>'name')) AS record,
       f->>'name' AS field, f->'type' AS type, f->'default' AS "default"
FROM (VALUES ('value', :'value_latest'::jsonb), ('key', :'key_latest'::jsonb)) s (subject, latest),
     jsonb_array_elements(s.latest->'schema'->'fields') f;
SELECT streaming.run_batch('av_to_kafka') IS NOT NULL AS ran;
-- every value: a zero byte, the id of the subject's schema, Avro
SELECT count(*) AS messages,
       bool_and(get_byte(value, 0) = 0 AND substr(value, 2, 4) = int4send((:'value_latest'::jsonb->>'id')::int)) AS value_wire_format,
       bool_and(get_byte(key, 0) = 0 AND substr(key, 2, 4) = int4send((:'key_latest'::jsonb->>'id')::int)) AS key_wire_format
FROM streaming.outbox;
SELECT streaming.start('av_to_kafka');
SELECT streaming.process_available('av_to_kafka');
SELECT streaming.create_kafka_source('av_back', :'bs', topics => ARRAY['avro_out' || :'run'],
    starting_offsets => 'earliest', format => 'avro', key_format => 'avro', schema_registry => :'reg');
\d av_back
SELECT streaming.create_stream('av_back_all', 'SELECT * FROM av_back', start => false);
SELECT streaming.run_batch('av_back_all') IS NOT NULL AS ran;
SELECT i, big, dec, any_numeric, ts, lts, dt, tm, s, u, "by", b, f, d, rec, en, kafka_key_avro
FROM av_back_all ORDER BY kafka_offset;
-- the same rows as the source's
SELECT count(*) AS differences FROM (
    (SELECT i, l, dec, ts, lts, dt, tm, s, u, "by", b, f, d, rec, en FROM av_types_all
     EXCEPT SELECT i, big, dec, ts, lts, dt, tm, s, u, "by", b, f, d, rec::jsonb, en FROM av_back_all)
    UNION ALL
    (SELECT i, big, dec, ts, lts, dt, tm, s, u, "by", b, f, d, rec::jsonb, en FROM av_back_all
     EXCEPT SELECT i, l, dec, ts, lts, dt, tm, s, u, "by", b, f, d, rec, en FROM av_types_all)) d;

-- clean up
SELECT streaming.drop_stream(name, drop_sink => true, force => true) FROM streaming.streams ORDER BY name;
SELECT streaming.drop_source(name) FROM streaming.sources ORDER BY name;
DROP FUNCTION av_error(text), av_strip(text);
DROP FUNCTION stm_error(text), stm_strip(text);
DROP FUNCTION stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
