--
-- security: who may do what (SPEC 7).  A second, hostile role tries what
-- it could do to another role's sources, streams, Kafka sinks and outbox
-- rows: every attempt fails and changes nothing.  Batches run as their
-- stream's owner whoever runs them.
-- Workers, NOLOGIN owners, DROP EXTENSION and credentials in logs are in
-- test/t/009_security.pl.
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET sec.run = :'run';
CREATE FUNCTION sec_strip(t text) RETURNS text
    LANGUAGE sql STABLE RETURN replace(t, current_setting('sec.run'), '');

-- roles made with CREATE ROLE cannot log in: the owner needs no LOGIN
CREATE ROLE regress_sec_alice;
CREATE ROLE regress_sec_carol;
CREATE ROLE regress_sec_mallory;
GRANT CREATE ON SCHEMA public TO regress_sec_alice, regress_sec_carol, regress_sec_mallory;
CREATE SCHEMA regress_sec_alice AUTHORIZATION regress_sec_alice;

\set t sec_orders:run
\! printf '%s\n' '{"id": 1, "v": "a"}' '{"id": 2, "v": "b"}' 'not json' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "sec_orders$KAFKA_RUN_ID" -p 0
\! printf '%s\n' '{"id": 3, "v": "c"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "sec_orders$KAFKA_RUN_ID" -p 1

--
-- alice's source and streams
--
SET ROLE regress_sec_alice;
-- alice's objects go to schema public, but for who()
SET search_path = public;
SELECT streaming.create_kafka_source('sec_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'id bigint, v text',
    kafka_options => '{"client.id": "sec", "sasl.password": "not-for-mallory"}');
-- who(): found through "$user" in the search_path the streams keep
CREATE FUNCTION regress_sec_alice.who(v text) RETURNS text
    LANGUAGE sql STABLE RETURN current_user || ':' || v;
RESET search_path;
SHOW search_path;
SELECT streaming.create_stream('sec_who', $$SELECT id, who(v) AS who FROM sec_src$$,
    sink => 'public.sec_who', start => false);
SELECT streaming.create_stream('sec_cu', $$SELECT id, current_user AS by_role FROM sec_src$$,
    sink => 'public.sec_cu', start => false);
SET search_path = public;
-- the sink's defaults and triggers run as the owner too
ALTER TABLE sec_who ADD COLUMN written_by name DEFAULT current_user;
CREATE TABLE sec_audit (what text, by_role name);
CREATE FUNCTION sec_audit_trigger() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sec_audit VALUES ('trigger ' || NEW.id, current_user);
    RETURN NEW;
END $$;
CREATE TRIGGER sec_audit BEFORE INSERT ON sec_who FOR EACH ROW EXECUTE FUNCTION sec_audit_trigger();
-- a sink function (foreachBatch) as well
CREATE FUNCTION sec_merge(batch_id bigint, batch regclass) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO sec_audit SELECT ''sink_function '' || count(*), current_user FROM %s', batch);
END $$;
SELECT streaming.create_stream('sec_fn', $$SELECT id FROM sec_src$$,
    sink_function => 'sec_merge(bigint, regclass)', start => false);
-- and a Kafka sink, whose credentials are alice's own
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('sec_ksink', :'bs', 'sec_out' || :'run',
    kafka_options => '{"client.id": "sec", "sasl.password": "not-for-mallory"}');
\set VERBOSITY default
SELECT streaming.create_stream('sec_kst', $$SELECT id, current_user AS by_role FROM sec_src$$,
    sink => 'sec_ksink', start => false);
RESET search_path;
RESET ROLE;

-- a superuser runs alice's batches: the query, the sink's default, its
-- trigger and the sink function all run as alice, and "$user" in the
-- stream's search_path is alice, not the superuser (whose own schema has a
-- who() that must not be called)
DO $$
BEGIN
    EXECUTE format('CREATE SCHEMA %I', current_user);
    EXECUTE format($f$CREATE FUNCTION %I.who(v text) RETURNS text LANGUAGE sql RETURN 'the superuser''s who()'$f$,
                   current_user);
END $$;
SELECT streaming.run_batch('sec_who');
SELECT id, who, written_by FROM sec_who ORDER BY id;
SELECT streaming.run_batch('sec_cu');
SELECT id, by_role FROM sec_cu ORDER BY id;
SELECT streaming.run_batch('sec_fn');
SELECT what, by_role FROM sec_audit ORDER BY what;
SELECT streaming.run_batch('sec_kst');
-- (a batch's records of two partitions come in the order they were
-- fetched, and so do their seqs: the messages by value)
SELECT convert_from(value, 'UTF8') AS value FROM streaming.outbox ORDER BY value;
DO $$ BEGIN EXECUTE format('DROP SCHEMA %I CASCADE', current_user); END $$;

--
-- mallory, the hostile role
--
SET ROLE regress_sec_mallory;
-- sees none of alice's rows, in any table or view of the extension
SELECT (SELECT count(*) FROM streaming.sources) AS sources,
       (SELECT count(*) FROM streaming.stream_defs) AS stream_defs,
       (SELECT count(*) FROM streaming.positions) AS positions,
       (SELECT count(*) FROM streaming.batches) AS batches,
       (SELECT count(*) FROM streaming.dead_letters) AS dead_letters,
       (SELECT count(*) FROM streaming.late_rows) AS late_rows,
       (SELECT count(*) FROM streaming.streams) AS streams,
       (SELECT count(*) FROM streaming.progress) AS progress,
       (SELECT count(*) FROM streaming.source_lag) AS source_lag,
       (SELECT count(*) FROM streaming.worker_pids()) AS worker_pids,
       (SELECT count(*) FROM streaming.sinks) AS sinks,
       (SELECT count(*) FROM streaming.outbox) AS outbox;
-- may change no catalog table directly: every INSERT, UPDATE and DELETE
UPDATE streaming.sources SET options = '{"kafka_options": {"plugin.library.paths": "/tmp/evil.so"}}';
UPDATE streaming.sources SET owner = 'regress_sec_mallory';
INSERT INTO streaming.sources (name, kind, view, options) VALUES ('evil', 'kafka', 'pg_class', '{}');
DELETE FROM streaming.sources;
UPDATE streaming.stream_defs SET query = 'SELECT 1';
INSERT INTO streaming.stream_defs (name, source, query, output_mode, trigger, late_rows, search_path)
    VALUES ('evil', 'sec_src', 'SELECT 1', 'append', '0', 'drop', 'public');
DELETE FROM streaming.stream_defs;
UPDATE streaming.positions SET position = 0;
INSERT INTO streaming.positions VALUES (1, 't', 0, 0, 0);
DELETE FROM streaming.positions;
UPDATE streaming.batches SET num_input_rows = 0;
DELETE FROM streaming.batches;
INSERT INTO streaming.dead_letters (stream, stream_id, source, position, error, sqlstate)
    VALUES ('sec_who', 1, 'sec_src', '{}', 'x', 'x');
UPDATE streaming.dead_letters SET error = 'x';
DELETE FROM streaming.dead_letters;
INSERT INTO streaming.late_rows (stream, stream_id, position) VALUES ('sec_who', 1, '{}');
DELETE FROM streaming.late_rows;
UPDATE streaming.sinks SET options = '{"kafka_options": {"plugin.library.paths": "/tmp/evil.so"}}';
UPDATE streaming.sinks SET owner = 'regress_sec_mallory';
INSERT INTO streaming.sinks (name, kind, options) VALUES ('evil', 'kafka', '{}');
DELETE FROM streaming.sinks;
INSERT INTO streaming.outbox_chunks (stream_id, batch_id, first_seq, nmsgs, messages)
    SELECT id, 0, 99, 1, '\xffffffff00000006666f72676564'::bytea FROM streaming.stream_defs;
UPDATE streaming.outbox_chunks SET messages = '\xffffffff00000006666f72676564';
DELETE FROM streaming.outbox_chunks;
-- streaming.outbox is a view of the chunks: nothing goes through it either
INSERT INTO streaming.outbox (stream_id, batch_id, seq, value, headers)
    SELECT id, 0, 99, 'forged', '{}' FROM streaming.stream_defs;
DELETE FROM streaming.outbox;
-- anyone may unpack a chunk; bytes that are not one are an error, never a read past their end
SELECT ord, key, convert_from(value, 'UTF8') AS value
FROM streaming.outbox_messages('\xffffffff00000006666f72676564');
SELECT * FROM streaming.outbox_messages('\xffffffff0000ffff666f');
SELECT * FROM streaming.outbox_messages('\x7fffffff');
SELECT * FROM streaming.outbox_messages('\x000000');
SELECT * FROM streaming.outbox_messages('\xfffffffe00000000');
SELECT nextval('streaming.stream_defs_id_seq');
-- alice's streams and sources do not exist for mallory
SELECT streaming.stop('sec_who');
SELECT streaming.start('sec_who');
SELECT streaming.reset('sec_who');
SELECT streaming.run_batch('sec_who');
SELECT streaming.process_available('sec_who');
SELECT streaming.drop_stream('sec_who');
SELECT streaming.drop_source('sec_src');
SELECT streaming.drop_stream('sec_kst', force => true);
SELECT streaming.drop_kafka_sink('sec_ksink');
-- nor may mallory read alice's source
SELECT streaming.create_stream('sec_steal', 'SELECT * FROM sec_src', start => false);
-- a name is taken whoever took it
SELECT streaming.create_stream('sec_who', 'SELECT * FROM sec_src', start => false);
-- the resource limits are the administrator's
SET streaming.max_record_size = '100MB';
SET streaming.kafka_timeout = '1h';
SET streaming.progress_history = 1000000;
ALTER ROLE regress_sec_mallory SET streaming.max_record_size = '100MB';
-- an aggregate mallory may not execute is refused, at create time and
-- in every batch
RESET ROLE;
CREATE FUNCTION sec_sum_trans(bigint, bigint) RETURNS bigint LANGUAGE sql IMMUTABLE RETURN $1 + $2;
CREATE AGGREGATE sec_sum(bigint) (sfunc = sec_sum_trans, stype = bigint, combinefunc = sec_sum_trans);
REVOKE EXECUTE ON FUNCTION sec_sum(bigint) FROM PUBLIC;
SET ROLE regress_sec_mallory;
SELECT streaming.create_kafka_source('sec_msrc', :'bs', topics => ARRAY[:'t'], columns => 'id bigint, v text');
SELECT streaming.create_stream('sec_msum', 'SELECT v, sec_sum(id) FROM sec_msrc GROUP BY v',
    output_mode => 'complete', start => false);
-- nor write to alice's Kafka sink, with alice's credentials
SELECT streaming.create_stream('sec_msteal', 'SELECT id, v FROM sec_msrc', sink => 'sec_ksink', start => false);
SELECT count(*) AS no_sink_table FROM pg_class WHERE relname = 'sec_msteal';
SELECT streaming.drop_source('sec_msrc');
-- and properties that load code or read files are the superuser's
SELECT streaming.create_kafka_source('sec_evil', :'bs', topics => ARRAY[:'t'],
    kafka_options => '{"plugin.library.paths": "/tmp/evil.so"}');
SELECT streaming.create_kafka_source('sec_evil', :'bs', topics => ARRAY[:'t'],
    kafka_options => '{"ssl.key.location": "/etc/ssl/private/server.key"}');
SELECT streaming.create_kafka_sink('sec_evil', :'bs', 'evil', kafka_options => '{"plugin.library.paths": "/tmp/evil.so"}');
SELECT streaming.create_kafka_sink('sec_evil', :'bs', 'evil', kafka_options => '{"ssl.ca.location": "/etc/ssl/private"}');
SELECT streaming.create_kafka_sink('sec_evil', :'bs', 'evil', kafka_options => '{"queue.buffering.max.kbytes": 2000000}');
-- a name is taken whoever took it
SELECT streaming.create_kafka_sink('sec_ksink', :'bs', 'evil');
RESET ROLE;
-- nothing of alice's changed
SELECT name, kind, sec_strip((options - 'bootstrap_servers')::text) AS options, owner FROM streaming.sources;
SELECT name, source, query, owner, status FROM streaming.stream_defs ORDER BY name;
SELECT name, kind, sec_strip((options - 'bootstrap_servers')::text) AS options, owner FROM streaming.sinks;
SELECT s.name, o.batch_id, convert_from(o.value, 'UTF8') AS value
FROM streaming.outbox o JOIN streaming.stream_defs s ON s.id = o.stream_id ORDER BY 1, 2, 3;
SELECT s.name, o.batch_id, string_agg(o.seq::text, ',' ORDER BY o.seq) AS seqs
FROM streaming.outbox o JOIN streaming.stream_defs s ON s.id = o.stream_id GROUP BY 1, 2 ORDER BY 1, 2;
SELECT count(*) AS mallory_objects FROM pg_class WHERE relowner = 'regress_sec_mallory'::regrole;

--
-- nothing in the extension is SECURITY DEFINER: its functions are C code
-- that takes the extension owner's identity itself for catalog work, with
-- search_path pinned; so an operator a role puts in front of pg_catalog is
-- never called by the extension's own SQL (mallory's fails when called)
--
SELECT count(*) FILTER (WHERE p.prosecdef) AS security_definer,
       count(*) FILTER (WHERE l.lanname <> 'c') AS not_in_c
FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
WHERE p.pronamespace = 'streaming'::regnamespace;
CREATE SCHEMA regress_sec_trap AUTHORIZATION regress_sec_mallory;
SET ROLE regress_sec_mallory;
CREATE FUNCTION regress_sec_trap.trap_eq(integer, integer) RETURNS boolean
    LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked: % = %', $1, $2; END$$;
CREATE OPERATOR regress_sec_trap.= (LEFTARG = integer, RIGHTARG = integer,
    FUNCTION = regress_sec_trap.trap_eq);
CREATE FUNCTION regress_sec_trap.trap_text_eq(text, text) RETURNS boolean
    LANGUAGE plpgsql AS $$BEGIN RAISE EXCEPTION 'hijacked: % = %', $1, $2; END$$;
CREATE OPERATOR regress_sec_trap.= (LEFTARG = text, RIGHTARG = text,
    FUNCTION = regress_sec_trap.trap_text_eq);
SET search_path = regress_sec_trap, pg_catalog, public;
SELECT streaming.create_kafka_source('sec_trap_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'id bigint, v text');
SELECT streaming.create_stream('sec_trap', 'SELECT id, v FROM sec_trap_src', start => false);
SELECT streaming.run_batch('sec_trap') IS NOT NULL AS ran;
SELECT count(*) > 0 AS read_rows FROM regress_sec_trap.sec_trap;
SELECT streaming.reset('sec_trap');
SELECT streaming.drop_stream('sec_trap', drop_sink => true);
SELECT streaming.drop_source('sec_trap_src');
RESET search_path;
RESET ROLE;
DROP SCHEMA regress_sec_trap CASCADE;

--
-- a property smuggled into a stored definition (by a superuser, by a
-- restore) is checked again, for the owners, when a client is built from it
--
UPDATE streaming.sources
SET options = jsonb_set(options, '{kafka_options,plugin.library.paths}', '"/nonexistent/evil.so"')
WHERE name = 'sec_src';
SELECT streaming.run_batch('sec_who');
SET ROLE regress_sec_alice;
SELECT streaming.process_available('sec_who');
RESET ROLE;
UPDATE streaming.sources SET options = options #- '{kafka_options,plugin.library.paths}'
WHERE name = 'sec_src';

--
-- a stream's state tables are the extension's: its owner may read them,
-- but not change them (stored states of type internal are bytes that the
-- aggregates' deserialize functions trust)
--
SET ROLE regress_sec_alice;
SELECT streaming.create_stream('sec_agg', $$SELECT v, count(*) AS n, avg(id) AS a FROM sec_src GROUP BY v$$,
    output_mode => 'complete', dedup_keys => ARRAY['id'], sink => 'public.sec_agg', start => false);
SELECT streaming.run_batch('sec_agg');
SELECT v, n, a FROM public.sec_agg ORDER BY v;
DO $$
DECLARE
    id int := (SELECT s.id FROM streaming.stream_defs s WHERE s.name = 'sec_agg');
    n bigint;
    stmt text;
BEGIN
    EXECUTE format('SELECT count(*) FROM streaming.state_%s', id) INTO n;
    RAISE NOTICE 'alice reads her state: % rows', n;
    FOREACH stmt IN ARRAY ARRAY[
        format($q$UPDATE streaming.state_%s SET state_2 = '\xdeadbeef'$q$, id),
        format('INSERT INTO streaming.state_%s (group_key) VALUES (''\x00'')', id),
        format('DELETE FROM streaming.dedup_%s', id),
        format('DROP TABLE streaming.state_%s', id),
        format('ALTER TABLE streaming.state_%s ADD COLUMN x int', id)]
    LOOP
        BEGIN
            EXECUTE stmt;
            RAISE NOTICE 'alice could run: %', stmt;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE NOTICE 'refused (%): %', SQLSTATE, regexp_replace(SQLERRM, '_[0-9]+', '_<id>');
        END;
    END LOOP;
END $$;
SELECT streaming.drop_stream('sec_agg', drop_sink => true);
RESET ROLE;

--
-- dead letters and late rows belong to a stream by id: a new stream with
-- an old name sees nothing of the old one
--
SET ROLE regress_sec_alice;
SELECT streaming.create_stream('sec_dl', $$SELECT id FROM sec_src$$, start => false);
SELECT streaming.run_batch('sec_dl');
SELECT stream, sec_strip(position::text) AS position, error FROM streaming.dead_letters WHERE stream = 'sec_dl';
SELECT streaming.drop_stream('sec_dl', drop_sink => true);
SELECT streaming.create_stream('sec_dl', $$SELECT id FROM sec_src$$, start => false);
SELECT count(*) AS old_dead_letters FROM streaming.dead_letters WHERE stream = 'sec_dl';
SELECT streaming.drop_stream('sec_dl', drop_sink => true);
RESET ROLE;

--
-- a role that owns streams cannot be dropped; REASSIGN OWNED gives them
-- away, DROP OWNED drops them (and the sources)
--
DROP ROLE regress_sec_alice;
REASSIGN OWNED BY regress_sec_alice TO regress_sec_carol;
SELECT name, owner FROM streaming.sources;
SELECT name, owner FROM streaming.sinks;
SELECT name, owner FROM streaming.stream_defs ORDER BY name;
-- carol's now, and they run as carol
SELECT streaming.reset('sec_cu');
TRUNCATE sec_cu;
SELECT streaming.run_batch('sec_cu');
SELECT id, by_role FROM sec_cu ORDER BY id;
-- "$user" in a stream's search_path is its owner: carol has no who()
SELECT streaming.reset('sec_who');
SELECT streaming.run_batch('sec_who');
DROP ROLE regress_sec_carol;
DROP OWNED BY regress_sec_carol;
SELECT count(*) AS streams FROM streaming.stream_defs;
SELECT count(*) AS sources FROM streaming.sources;
SELECT count(*) AS sinks FROM streaming.sinks;
SELECT count(*) AS outbox_rows FROM streaming.outbox;
DROP ROLE regress_sec_carol;
DROP OWNED BY regress_sec_alice;
DROP ROLE regress_sec_alice;

--
-- names with spaces, quotes, upper case and non-ASCII letters, end to end
--
\set t2 sec_names:run
\! printf '%s\n' '{"Id": 1, "välue \"v\"": "ä"}' '{"Id": 2, "välue \"v\"": "b"}' '{"Id": 1, "välue \"v\"": "ä"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "sec_names$KAFKA_RUN_ID" -p 0
CREATE ROLE "regress_sec Rôle ""Q""";
GRANT CREATE ON SCHEMA public TO "regress_sec Rôle ""Q""";
SET ROLE "regress_sec Rôle ""Q""";
SELECT streaming.create_kafka_source('Src "q" Ünï', :'bs', topics => ARRAY[:'t2'],
    starting_offsets => 'earliest', columns => '"Id" bigint, "välue ""v""" text');
\d "Src ""q"" Ünï"
SELECT streaming.create_stream('Strëam "x" Y',
    $$SELECT "Id", upper("välue ""v""") AS "Ünï ""U""" FROM "Src ""q"" Ünï"$$, start => false);
SELECT streaming.create_stream('Cöunt "c"',
    $$SELECT "välue ""v""" AS "Välue", count(*) AS "N" FROM "Src ""q"" Ünï" GROUP BY "välue ""v"""$$,
    output_mode => 'complete', dedup_keys => ARRAY['Id'], start => false);
SELECT streaming.run_batch('Strëam "x" Y');
SELECT streaming.run_batch('Cöunt "c"');
SELECT * FROM "Strëam ""x"" Y" ORDER BY "Id";
SELECT * FROM "Cöunt ""c""" ORDER BY 1;
SELECT name, source, sink, output_mode, status, last_batch_id FROM streaming.streams ORDER BY name;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_bad_rows FROM streaming.progress ORDER BY 1;
SELECT stream, error FROM streaming.dead_letters ORDER BY 1;
SELECT streaming.stop('Strëam "x" Y');
SELECT streaming.reset('Strëam "x" Y');
SELECT streaming.drop_stream('Strëam "x" Y', drop_sink => true);
SELECT streaming.drop_stream('Cöunt "c"', drop_sink => true);
SELECT streaming.drop_source('Src "q" Ünï');
RESET ROLE;
DROP OWNED BY "regress_sec Rôle ""Q""";
DROP ROLE "regress_sec Rôle ""Q""";
DROP OWNED BY regress_sec_mallory;
DROP ROLE regress_sec_mallory;
DROP AGGREGATE sec_sum(bigint);
DROP FUNCTION sec_sum_trans(bigint, bigint);
