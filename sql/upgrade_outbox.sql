-- upgrade_outbox: ALTER EXTENSION streaming UPDATE from 0.2.0 moves the
-- messages waiting in 0.2.0's outbox (a row each) into 0.3.0's chunks,
-- keeping each key and value, a NULL key and a tombstone (NULL value) apart
-- from empty ones; streaming.outbox then shows them through the view, and
-- pg_dump keeps the new table instead of the old one.  In a database of its
-- own, which the extension's scripts alone build (no stream runs there).
\set regress_db :DBNAME
CREATE DATABASE regress_upgrade_outbox;
\c regress_upgrade_outbox
SET client_min_messages = warning;
CREATE EXTENSION streaming VERSION '0.2.0';
-- a stream writing to a Kafka sink, as 0.2.0's functions would have stored it
CREATE VIEW up_src AS SELECT 1 AS x;
INSERT INTO streaming.sources (name, kind, view, options) VALUES ('up_src', 'kafka', 'up_src', '{}');
INSERT INTO streaming.sinks (name, kind, options) VALUES ('up_sink', 'kafka', '{}');
INSERT INTO streaming.stream_defs (name, source, query, output_mode, trigger, late_rows, search_path, sink_name)
VALUES ('up_st', 'up_src', 'SELECT 1', 'append', '0', 'drop', 'public', 'up_sink');
INSERT INTO streaming.outbox (stream_id, batch_id, seq, key, value, headers)
SELECT s.id, b, q, k, v, '{}' FROM streaming.stream_defs s,
    (VALUES (3, 0, 'k1'::bytea, '{"a":1}'::bytea), (3, 1, NULL, 'v'), (3, 2, 'k3', NULL),
            (4, 0, '', '')) AS m(b, q, k, v);
ALTER EXTENSION streaming UPDATE TO '0.3.0';
SELECT extversion FROM pg_extension WHERE extname = 'streaming';
SELECT stream, batch_id, seq, key, value, key IS NULL AS no_key, value IS NULL AS tombstone, headers
FROM streaming.outbox ORDER BY batch_id, seq;
SELECT batch_id, first_seq, nmsgs FROM streaming.outbox_chunks ORDER BY 1, 2;
SELECT outbox_rows FROM streaming.streams;
SELECT to_regclass('streaming.outbox_chunks') IN (SELECT unnest(extconfig) FROM pg_extension WHERE extname = 'streaming') AS chunks_dumped,
       EXISTS (SELECT FROM pg_class WHERE relname = 'outbox' AND relkind = 'r') AS old_table_left;
\c :regress_db
DROP DATABASE regress_upgrade_outbox WITH (FORCE);
