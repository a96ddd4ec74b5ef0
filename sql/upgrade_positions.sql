-- upgrade_positions: ALTER EXTENSION streaming UPDATE from 0.3.0 keeps every
-- stored position of every kind of source, as 0.3.0 kept them in
-- streaming.offsets: a Kafka stream's offsets and high watermarks, a file
-- stream's pending files (the file name, 0, its size), a rate stream's
-- counters per partition.  streaming.positions then holds the same parts at
-- the same positions, streaming.source_lag and streaming.streams.lag show
-- exactly what they showed before, and pg_dump keeps the new table.  In a
-- database of its own, which the extension's scripts alone build (no
-- stream runs there).
\set regress_db :DBNAME
CREATE DATABASE regress_upgrade_positions;
\c regress_upgrade_positions
SET client_min_messages = warning;
CREATE EXTENSION streaming VERSION '0.3.0';
-- a stream of each kind, as 0.3.0's functions would have stored them
CREATE VIEW up_kafka AS SELECT 1 AS x;
CREATE VIEW up_file AS SELECT 1 AS x;
CREATE VIEW up_rate AS SELECT 1 AS x;
INSERT INTO streaming.sources (name, kind, view, options) VALUES
    ('up_kafka', 'kafka', 'up_kafka', '{}'), ('up_file', 'file', 'up_file', '{}'),
    ('up_rate', 'rate', 'up_rate', '{}');
INSERT INTO streaming.stream_defs (name, source, query, output_mode, trigger, late_rows, search_path)
SELECT s || '_st', s, 'SELECT 1', 'append', '0', 'drop', 'public'
FROM unnest(ARRAY['up_kafka', 'up_file', 'up_rate']) AS s;
INSERT INTO streaming.offsets (stream_id, topic, partition, next_offset, high_watermark)
SELECT d.id, o.topic, o.partition, o.next_offset, o.high_watermark
FROM streaming.stream_defs d JOIN (VALUES
    -- Kafka: topic, partition, next offset, high watermark (NULL: not known yet)
    ('up_kafka', 'orders', 0, 42::bigint, 50::bigint), ('up_kafka', 'orders', 1, 7, 7),
    ('up_kafka', 'orders', 10, 0, NULL), ('up_kafka', 'clicks', 0, 100, 250),
    -- files waiting to be read: the name, 0, 0, the size
    ('up_file', 'b.csv', 0, 0, 1234), ('up_file', 'a.csv', 0, 0, 0),
    -- rate: the source's name, each partition's values taken and due
    ('up_rate', 'up_rate', 0, 17, 20), ('up_rate', 'up_rate', 1, 16, 20)
) AS o(source, topic, partition, next_offset, high_watermark) ON o.source = d.source;
CREATE TABLE before_lag AS SELECT * FROM streaming.source_lag;
CREATE TABLE before_streams AS SELECT name, lag FROM streaming.streams;
ALTER EXTENSION streaming UPDATE TO '0.4.0';
RESET client_min_messages;
SELECT extversion FROM pg_extension WHERE extname = 'streaming';
-- every position of every kind, as it was
SELECT d.source, p.part, p.part_no, p.position, p.end_position, p.detail
FROM streaming.positions p JOIN streaming.stream_defs d ON d.id = p.stream_id
ORDER BY 1, 2, 3;
-- source_lag and streams.lag: the same rows, and the same columns
-- (0.4.0's source_lag has a source column at the end too: the source each position is of)
SELECT * FROM streaming.source_lag ORDER BY stream, topic, partition;
SELECT (SELECT count(*) FROM (SELECT stream, topic, partition, committed_offset, high_watermark, lag FROM streaming.source_lag
                              EXCEPT ALL SELECT * FROM before_lag) d) AS new_lag_rows,
       (SELECT count(*) FROM (SELECT * FROM before_lag EXCEPT ALL
                              SELECT stream, topic, partition, committed_offset, high_watermark, lag FROM streaming.source_lag) d) AS lost_lag_rows,
       (SELECT count(*) FROM (SELECT name, lag FROM streaming.streams EXCEPT ALL SELECT * FROM before_streams) d) AS changed_streams;
SELECT name, lag FROM streaming.streams ORDER BY name;
-- pg_dump keeps the renamed table; no table of the old name is left
SELECT to_regclass('streaming.positions') IN (SELECT unnest(extconfig) FROM pg_extension WHERE extname = 'streaming') AS positions_dumped,
       to_regclass('streaming.offsets') IS NULL AS no_offsets_left;
\c :regress_db
DROP DATABASE regress_upgrade_positions WITH (FORCE);
