/*
 * streaming 0.3.0 -> 0.4.0.  Each change below says what it is for; every
 * catalog change is made here and in streaming--0.4.0.sql alike
 * (test/t/008_upgrade.pl compares the upgraded catalog with a fresh
 * install).
 */
\echo Use "ALTER EXTENSION streaming UPDATE" to load this file. \quit

/*
 * A restored stream is stopped (SPEC 1).  pg_dump keeps stream_defs as it
 * was, running streams included, and a restore that started them would
 * consume and produce by surprise (logical replication restores its
 * subscriptions disabled for the same reason).  Only a restore inserts a
 * row that runs: create_stream inserts a stream stopped, then starts it.
 * ENABLE ALWAYS: a restore under session_replication_role = replica stops
 * them too.  A WARNING says so (pg_dump's scripts hide NOTICEs).
 */
CREATE FUNCTION streaming.restore_stopped() RETURNS trigger
AS 'MODULE_PATHNAME', 'streaming_restore_stopped'
LANGUAGE C;
CREATE TRIGGER restore_stopped BEFORE INSERT ON streaming.stream_defs
    FOR EACH ROW EXECUTE FUNCTION streaming.restore_stopped();
ALTER TABLE streaming.stream_defs ENABLE ALWAYS TRIGGER restore_stopped;

/*
 * Positions of every kind of source (src/positions.c): streaming.offsets
 * named Kafka's terms (topic, partition, next_offset, high_watermark) though
 * the file and rate sources kept their positions there too; it becomes
 * streaming.positions, a part (named, numbered within its name) with a
 * position and an end position in the part's own unit, and a detail for
 * what else a kind keeps.  Renamed in place: every stored position (Kafka
 * offsets, pending files, rate sources' counters) stays as it is and means
 * the same, and so do the table's registration with
 * pg_extension_config_dump, its policy and its privileges.  source_lag is
 * made again over the new names: its columns and values do not change.
 */
ALTER TABLE streaming.offsets RENAME TO positions;
ALTER TABLE streaming.positions RENAME COLUMN topic TO part;
ALTER TABLE streaming.positions RENAME COLUMN partition TO part_no;
ALTER TABLE streaming.positions RENAME COLUMN next_offset TO position;
ALTER TABLE streaming.positions RENAME COLUMN high_watermark TO end_position;
ALTER TABLE streaming.positions ADD COLUMN detail jsonb;
ALTER INDEX streaming.offsets_pkey RENAME TO positions_pkey;
ALTER TABLE streaming.positions RENAME CONSTRAINT offsets_stream_id_fkey TO positions_stream_id_fkey;
COMMENT ON TABLE streaming.positions IS 'Where each stream reads next in each part of its source (a Kafka partition, a rate source''s partition, a file waiting to be read), written in the batch''s transaction; read it through streaming.source_lag.';

-- every kind's parts alike: a part's lag is its end position minus its position
CREATE OR REPLACE VIEW streaming.source_lag WITH (security_invoker = true) AS
SELECT s.name AS stream, p.part AS topic, p.part_no AS partition,
       p.position AS committed_offset, p.end_position AS high_watermark,
       greatest(coalesce(p.end_position, p.position) - p.position, 0) AS lag
FROM streaming.positions p JOIN streaming.stream_defs s ON s.id = p.stream_id;

/*
 * The outbox's chunks compressed in their rows (lz4, when the server has
 * it): a third of the bytes to write, WAL-log and keep in shared buffers
 * for JSON rows.  Rows already there stay as they are; new ones are
 * compressed.  Without lz4 nothing changes (pglz would cost more CPU than it
 * saves).
 */
DO $$
BEGIN
    ALTER TABLE streaming.outbox_chunks ALTER COLUMN messages SET COMPRESSION lz4;
    ALTER TABLE streaming.outbox_chunks ALTER COLUMN messages SET STORAGE MAIN;
    ALTER TABLE streaming.outbox_chunks SET (toast_tuple_target = 128);
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END $$;
