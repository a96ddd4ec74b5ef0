/*
 * streaming--0.1.0--0.2.0.sql: ALTER EXTENSION streaming UPDATE from 0.1.0.
 *
 * Every catalog change since 0.1.0 goes here as well as into
 * streaming--0.2.0.sql, so that an upgraded catalog equals a fresh install
 * (test/t/008_upgrade.pl compares the two).  Running streams keep their
 * positions, state and history: tables are altered in place, never
 * recreated.  So a column that ALTER TABLE ... ADD COLUMN adds here goes at
 * the end of its CREATE TABLE in streaming--0.2.0.sql (the comparison
 * includes column order), and a change to what the library creates per
 * stream (state tables in schema streaming, sinks, source views) changes
 * the existing ones here too: the test also compares the tables that
 * streams made under 0.1.0 with those the same streams get under 0.2.0.
 */
\echo Use "ALTER EXTENSION streaming UPDATE" to load this file. \quit

/*
 * Security (issue 7): the catalog tables are changed only by the
 * extension's functions, which write as the extension's owner; other roles
 * may only read their own rows.  Dead letters and late rows belong to their
 * stream by id.
 */
REVOKE INSERT, UPDATE, DELETE ON streaming.sources, streaming.stream_defs,
    streaming.offsets, streaming.batches, streaming.dead_letters, streaming.late_rows FROM PUBLIC;
REVOKE USAGE ON SEQUENCE streaming.stream_defs_id_seq, streaming.dead_letters_id_seq,
    streaming.late_rows_id_seq FROM PUBLIC;

ALTER TABLE streaming.dead_letters
    ADD COLUMN stream_id integer REFERENCES streaming.stream_defs (id) ON DELETE CASCADE;
UPDATE streaming.dead_letters d SET stream_id = s.id FROM streaming.stream_defs s WHERE s.name = d.stream;
DELETE FROM streaming.dead_letters WHERE stream_id IS NULL;
ALTER TABLE streaming.dead_letters ALTER COLUMN stream_id SET NOT NULL;
CREATE INDEX ON streaming.dead_letters (stream_id);
-- raw keeps the first 64 kB; its length and SHA-256 describe the whole record
ALTER TABLE streaming.dead_letters ADD COLUMN raw_length bigint, ADD COLUMN raw_sha256 bytea;
UPDATE streaming.dead_letters
SET raw_length = length(raw), raw_sha256 = sha256(raw), raw = substring(raw FROM 1 FOR 65536)
WHERE raw IS NOT NULL;

ALTER TABLE streaming.late_rows
    ADD COLUMN stream_id integer REFERENCES streaming.stream_defs (id) ON DELETE CASCADE;
UPDATE streaming.late_rows l SET stream_id = s.id FROM streaming.stream_defs s WHERE s.name = l.stream;
DELETE FROM streaming.late_rows WHERE stream_id IS NULL;
ALTER TABLE streaming.late_rows ALTER COLUMN stream_id SET NOT NULL;
CREATE INDEX ON streaming.late_rows (stream_id);

DROP POLICY owner_only ON streaming.sources;
DROP POLICY owner_only ON streaming.stream_defs;
DROP POLICY stream_owner_only ON streaming.late_rows;
DROP POLICY stream_owner_only ON streaming.offsets;
DROP POLICY stream_owner_only ON streaming.batches;
DROP POLICY stream_owner_only ON streaming.dead_letters;
CREATE POLICY owner_only ON streaming.sources FOR SELECT
    USING (pg_has_role(current_user, owner, 'USAGE'));
CREATE POLICY owner_only ON streaming.stream_defs FOR SELECT
    USING (pg_has_role(current_user, owner, 'USAGE'));
CREATE POLICY stream_owner_only ON streaming.late_rows FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
CREATE POLICY stream_owner_only ON streaming.offsets FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
CREATE POLICY stream_owner_only ON streaming.batches FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
CREATE POLICY stream_owner_only ON streaming.dead_letters FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));

-- worker_pids() also lists streams that should run but have no worker, and
-- why; streams shows them as waiting
DROP VIEW streaming.streams;
DROP FUNCTION streaming.worker_pids();
CREATE FUNCTION streaming.worker_pids(OUT stream_id integer, OUT pid integer, OUT problem text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'streaming_worker_pids'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION streaming.worker_pids IS 'The caller''s streams that should run: their worker (NULL while none) and why none runs.';
CREATE VIEW streaming.streams WITH (security_invoker = true) AS
SELECT s.name, s.source, s.sink, s.output_mode, s.trigger,
       -- running without a worker: waiting for one, and source_error says why
       CASE WHEN s.status = 'running' AND w.pid IS NULL AND w.problem IS NOT NULL
            THEN 'waiting' ELSE s.status END AS status,
       w.pid AS worker_pid, s.last_batch_id,
       CASE WHEN s.watermark_delay IS NOT NULL
            THEN coalesce(s.watermark, 'epoch'::timestamptz) END AS watermark,
       s.last_error, coalesce(s.source_error, w.problem) AS source_error,
       (SELECT sum(l.lag)::bigint FROM streaming.source_lag l WHERE l.stream = s.name) AS lag
FROM streaming.stream_defs s
LEFT JOIN streaming.worker_pids() w ON w.stream_id = s.id;
GRANT SELECT ON streaming.streams TO PUBLIC;

/*
 * State tables belong to the extension's owner, as the catalog does: a
 * stream's owner may read its state but no longer change it (the stored
 * states of type internal are bytes the aggregates' deserialize functions
 * trust).  Group columns of a domain type take its base type: the state
 * tables are written as the extension's owner, so a domain's checks (user
 * code) must not run there.
 */
DO $$
DECLARE
    t record;
    c record;
    ext_owner regrole := (SELECT extowner::regrole FROM pg_catalog.pg_extension WHERE extname = 'streaming');
BEGIN
    FOR t IN
        SELECT cl.oid::regclass AS tab, s.owner
        FROM streaming.stream_defs s
        JOIN pg_catalog.pg_class cl
          ON cl.relnamespace = 'streaming'::regnamespace
         AND cl.relname IN ('state_' || s.id, 'dedup_' || s.id)
    LOOP
        EXECUTE format('ALTER TABLE %s OWNER TO %s', t.tab, ext_owner);
        EXECUTE format('GRANT SELECT ON %s TO %s', t.tab, t.owner);
        FOR c IN
            SELECT a.attname, pg_catalog.format_type(ty.typbasetype, ty.typtypmod) AS base
            FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type ty ON ty.oid = a.atttypid
            WHERE a.attrelid = t.tab AND a.attnum > 0 AND NOT a.attisdropped AND ty.typtype = 'd'
        LOOP
            EXECUTE format('ALTER TABLE %s ALTER COLUMN %I TYPE %s', t.tab, c.attname, c.base);
        END LOOP;
        /*
         * A GRANT in an extension script records "initial privileges", as if
         * the table were one of the extension's own objects; it is not (a
         * stream made it), and one made by 0.2.0 has none.
         */
        DELETE FROM pg_catalog.pg_init_privs
        WHERE objoid = t.tab AND classoid = 'pg_catalog.pg_class'::regclass AND privtype = 'e';
    END LOOP;
END
$$;

/*
 * The rate source (issue 9): its create function, and the stream's start
 * time that its timestamps count from (written with the first batch,
 * forgotten by reset).
 */
ALTER TABLE streaming.stream_defs ADD COLUMN source_started_at timestamptz;

CREATE FUNCTION streaming.create_rate_source(
    name text,
    rows_per_second bigint,
    num_partitions integer DEFAULT 1,
    ramp_up_time interval DEFAULT '0')
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_rate_source'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_rate_source IS 'Define a rate source (values 0, 1, 2, ... at rows_per_second) and the view of its columns.';

/* The file source (issue 9): its positions, its create function, processed_files. */
/*
 * File sources' positions: every file a stream has read, with the batch that
 * read it (written in that batch's transaction), and the files it will never
 * read (batch_id NULL: older than max_file_age when the stream first saw
 * them).  A file is read once: a name listed here is never read again.  The
 * files waiting to be read are in streaming.offsets (topic = the file name,
 * high_watermark = its size), so that source_lag lists them.
 */
CREATE TABLE streaming.files (
    stream_id       integer NOT NULL REFERENCES streaming.stream_defs (id) ON DELETE CASCADE,
    file_name       text NOT NULL,
    size            bigint NOT NULL,
    mtime           timestamptz NOT NULL,
    batch_id        bigint,
    processed_at    timestamptz NOT NULL DEFAULT now(),
    cleaned_at      timestamptz,    -- clean_source deleted or archived it
    PRIMARY KEY (stream_id, file_name)
);
-- what clean_source has still to do
CREATE INDEX files_to_clean ON streaming.files (stream_id)
    WHERE batch_id IS NOT NULL AND cleaned_at IS NULL;
COMMENT ON TABLE streaming.files IS 'Files that file-source streams have read (or will never read), written in the batch''s transaction; read it through streaming.processed_files.';
SELECT pg_catalog.pg_extension_config_dump('streaming.files', '');
ALTER TABLE streaming.files ENABLE ROW LEVEL SECURITY;
CREATE POLICY stream_owner_only ON streaming.files FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
GRANT SELECT ON streaming.files TO PUBLIC;

CREATE FUNCTION streaming.create_file_source(
    name text,
    directory text,
    format text DEFAULT 'csv',
    columns text DEFAULT NULL,
    pattern text DEFAULT '*',
    csv_header boolean DEFAULT false,
    csv_delimiter text DEFAULT ',',
    max_files_per_trigger integer DEFAULT NULL,
    latest_first boolean DEFAULT false,
    max_file_age interval DEFAULT NULL,
    clean_source text DEFAULT 'off',
    archive_directory text DEFAULT NULL,
    on_bad_record text DEFAULT 'dead_letter')
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_file_source'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_file_source IS 'Define a source over the files of a directory and the view of its columns.';

CREATE VIEW streaming.processed_files WITH (security_invoker = true) AS
SELECT s.name AS stream, f.file_name, f.size, f.mtime, f.batch_id, f.processed_at
FROM streaming.files f JOIN streaming.stream_defs s ON s.id = f.stream_id
WHERE f.batch_id IS NOT NULL;
GRANT SELECT ON streaming.processed_files TO PUBLIC;

/*
 * The Kafka sink (issue 11): named sinks, which a stream may write to
 * instead of a table, their outbox, delivered rows in progress, and
 * drop_stream's force.
 */
CREATE TABLE streaming.sinks (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('kafka')),
    options     jsonb NOT NULL,
    owner       regrole NOT NULL DEFAULT current_user::regrole,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE streaming.sinks IS 'Sinks defined by create_kafka_sink; options holds every argument.';
ALTER TABLE streaming.stream_defs ADD COLUMN sink_name text REFERENCES streaming.sinks (name);
-- a table sink's rows reached it at commit
ALTER TABLE streaming.batches ADD COLUMN num_delivered_rows bigint NOT NULL DEFAULT 0,
    ADD COLUMN num_rejected_rows bigint NOT NULL DEFAULT 0;
UPDATE streaming.batches SET num_delivered_rows = num_output_rows;

CREATE TABLE streaming.outbox (
    stream_id   integer NOT NULL,
    batch_id    bigint NOT NULL,
    seq         bigint NOT NULL,    -- from 0 in each batch, in the order it wrote them
    key         bytea,
    value       bytea,              -- NULL: a tombstone
    headers     jsonb NOT NULL,     -- streaming-stream, streaming-batch-id, streaming-seq
    PRIMARY KEY (stream_id, batch_id, seq)
);
COMMENT ON TABLE streaming.outbox IS 'Messages of committed batches that their Kafka sink has not delivered yet.';
SELECT pg_catalog.pg_extension_config_dump('streaming.sinks', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.outbox', '');
ALTER TABLE streaming.sinks ENABLE ROW LEVEL SECURITY;
ALTER TABLE streaming.outbox ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_only ON streaming.sinks FOR SELECT
    USING (pg_has_role(current_user, owner, 'USAGE'));
CREATE POLICY stream_owner_only ON streaming.outbox FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
GRANT SELECT ON streaming.sinks, streaming.outbox TO PUBLIC;

CREATE FUNCTION streaming.create_kafka_sink(
    name text,
    bootstrap_servers text,
    topic text,
    format text DEFAULT 'json',
    key_columns text[] DEFAULT NULL,
    kafka_options jsonb DEFAULT '{}')
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_kafka_sink'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_kafka_sink IS 'Define a Kafka sink: streams that name it as their sink write their rows to the topic, through streaming.outbox.';

CREATE FUNCTION streaming.drop_kafka_sink(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_drop_kafka_sink'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

DROP FUNCTION streaming.drop_stream(text, boolean);
CREATE FUNCTION streaming.drop_stream(name text, drop_sink boolean DEFAULT false,
    force boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_drop_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

-- streams: the sink is a table's or a named sink's name; a Kafka sink's outbox rows
DROP VIEW streaming.streams;
CREATE VIEW streaming.streams WITH (security_invoker = true) AS
SELECT s.name, s.source, coalesce(s.sink_name, s.sink::text) AS sink, s.output_mode, s.trigger,
       -- running without a worker: waiting for one, and source_error says why
       CASE WHEN s.status = 'running' AND w.pid IS NULL AND w.problem IS NOT NULL
            THEN 'waiting' ELSE s.status END AS status,
       w.pid AS worker_pid, s.last_batch_id,
       CASE WHEN s.watermark_delay IS NOT NULL
            THEN coalesce(s.watermark, 'epoch'::timestamptz) END AS watermark,
       s.last_error, coalesce(s.source_error, w.problem) AS source_error,
       (SELECT sum(l.lag)::bigint FROM streaming.source_lag l WHERE l.stream = s.name) AS lag,
       -- a Kafka sink's messages not delivered yet
       CASE WHEN s.sink_name IS NOT NULL
            THEN (SELECT count(*) FROM streaming.outbox o WHERE o.stream_id = s.id) END AS outbox_rows
FROM streaming.stream_defs s
LEFT JOIN streaming.worker_pids() w ON w.stream_id = s.id;
GRANT SELECT ON streaming.streams TO PUBLIC;

CREATE OR REPLACE VIEW streaming.progress WITH (security_invoker = true) AS
SELECT s.name AS stream, b.batch_id, b.started_at, b.duration,
       b.num_input_rows,
       -- as Spark: input rate over the time since the previous batch started
       b.num_input_rows / nullif(extract(epoch FROM b.started_at - lag(b.started_at)
           OVER (PARTITION BY b.stream_id ORDER BY b.batch_id)), 0) AS input_rows_per_second,
       b.num_input_rows / nullif(extract(epoch FROM b.duration), 0) AS processed_rows_per_second,
       b.num_output_rows, b.num_late_rows, b.num_bad_rows, b.num_dedup_rows, b.num_state_rows,
       b.max_event_time, b.watermark, b.start_positions, b.end_positions, b.data_loss,
       b.num_delivered_rows, b.num_rejected_rows
FROM streaming.batches b JOIN streaming.stream_defs s ON s.id = b.stream_id;

-- parallel parse (issue 13): helpers per stream, create_stream's new argument, alter_stream
ALTER TABLE streaming.stream_defs
    ADD COLUMN parallel_workers integer NOT NULL DEFAULT 0 CHECK (parallel_workers >= 0); -- helpers that fetch and parse
DROP FUNCTION streaming.create_stream(text, text, text, text, interval, text, text[], boolean, text,
    regprocedure, text, interval, boolean);
CREATE FUNCTION streaming.create_stream(
    name text,
    query text,
    sink text DEFAULT NULL,
    output_mode text DEFAULT 'append',
    watermark interval DEFAULT NULL,
    event_time text DEFAULT NULL,
    dedup_keys text[] DEFAULT NULL,
    dedup_within_watermark boolean DEFAULT false,
    trigger text DEFAULT '0',
    sink_function regprocedure DEFAULT NULL,
    late_rows text DEFAULT 'drop',
    idle_timeout interval DEFAULT NULL,
    start boolean DEFAULT true,
    parallel_workers integer DEFAULT 0)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_stream IS 'Define a stream: a query over one source whose results go into a sink table.';
CREATE FUNCTION streaming.alter_stream(name text, parallel_workers integer DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_alter_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.alter_stream IS 'Change settings of a stream (NULL: unchanged); a running stream takes them at its next batch.';
