/* streaming--0.4.0.sql: catalog, functions and views of the streaming extension */
\echo Use "CREATE EXTENSION streaming" to load this file. \quit

/*
 * Catalog.  Everything a stream needs to resume lives in these tables and is
 * written in the batch's own transaction; shared memory is only a cache.
 * All of them are registered with pg_extension_config_dump so that pg_dump
 * keeps stream definitions together with their positions.
 */
CREATE TABLE streaming.sources (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('kafka', 'file', 'rate')),
    view        regclass NOT NULL UNIQUE,
    options     jsonb NOT NULL,
    owner       regrole NOT NULL DEFAULT current_user::regrole,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE streaming.sources IS 'Sources defined by create_kafka_source and friends; options holds every argument.';

/* Sinks that are not tables (SPEC 6.1): a stream names one as its sink. */
CREATE TABLE streaming.sinks (
    name        text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('kafka')),
    options     jsonb NOT NULL,
    owner       regrole NOT NULL DEFAULT current_user::regrole,
    created_at  timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE streaming.sinks IS 'Sinks defined by create_kafka_sink; options holds every argument.';

CREATE TABLE streaming.stream_defs (
    id              serial PRIMARY KEY,
    name            text NOT NULL UNIQUE,
    source          text NOT NULL REFERENCES streaming.sources (name),
    query           text NOT NULL,
    sink            regclass,
    output_mode     text NOT NULL,
    watermark_delay interval,
    event_time      text,
    dedup_keys      text[],
    dedup_within_watermark boolean NOT NULL DEFAULT false,
    trigger         text NOT NULL,
    sink_function   regprocedure,
    late_rows       text NOT NULL,
    idle_timeout    interval,
    enabled         boolean NOT NULL DEFAULT false,
    search_path     text NOT NULL,  -- the creator's, to analyse the query again
    owner           regrole NOT NULL DEFAULT current_user::regrole,
    created_at      timestamptz NOT NULL DEFAULT now(),
    -- run-time state, written by batches and by start/stop
    status          text NOT NULL DEFAULT 'stopped'
                    CHECK (status IN ('running', 'waiting', 'stopped', 'failed', 'finished', 'moved')),
    last_batch_id   bigint,
    positions_initialized boolean NOT NULL DEFAULT false, -- starting_offsets applied
    watermark       timestamptz,
    no_data_batch_due boolean NOT NULL DEFAULT false, -- the last batch moved the watermark
    idle_clock_at   timestamptz NOT NULL DEFAULT now(), -- idle_timeout counts from here: the last batch
                                                        -- that read records, or the last idle advance
    last_error      text,
    source_error    text,
    failures        integer NOT NULL DEFAULT 0,
    source_started_at timestamptz,  -- the first batch's start: the rate source's time origin
    sink_name       text REFERENCES streaming.sinks (name), -- a named sink (Kafka), instead of a table
    parallel_workers integer CHECK (parallel_workers >= 0), -- helpers that fetch and parse; NULL: automatic
    -- a join of two sources (SPEC 3.6): the right side's source, each side's watermark
    other_source    text REFERENCES streaming.sources (name),
    watermarks      jsonb,
    multiple_watermark_policy text NOT NULL DEFAULT 'min' CHECK (multiple_watermark_policy IN ('min', 'max')),
    side_watermarks jsonb,              -- per side: its watermark, idle clock and state rows, written by batches
    key_columns     text[],             -- upsert mode: the sink's key (output columns)
    state_rows      jsonb               -- per state table (by OID): the rows the last batch left, counted on by the next
);
COMMENT ON TABLE streaming.stream_defs IS 'Streams defined by create_stream, with their run-time state; read it through streaming.streams.';

/*
 * Source positions (src/positions.c), of every kind of source: per stream,
 * where it reads next in each part of its source.  A part is named by a text
 * and numbered within it: a Kafka partition (the topic, the partition), a
 * rate source's partition (the source's name, the partition), a file
 * waiting to be read (its name, 0).  position and end_position are in the
 * part's own unit (an offset, a byte, a count of values, an LSN), so that
 * streaming.source_lag computes every kind's lag as their difference, from
 * the row alone; what else a kind must keep to resume a part is its detail.
 */
CREATE TABLE streaming.positions (
    stream_id       integer NOT NULL REFERENCES streaming.stream_defs (id) ON DELETE CASCADE,
    part            text NOT NULL,      -- a topic, a source's name, a file's name
    part_no         integer NOT NULL,   -- the partition within part; 0 when it has none
    position        bigint NOT NULL,    -- where the stream reads next (Kafka: the next offset)
    end_position    bigint,             -- how far the part went when last planned (Kafka: the high watermark)
    detail          jsonb,              -- anything else the kind keeps about the part
    source          text NOT NULL,      -- whose part: a join's stream reads two sources
    PRIMARY KEY (stream_id, source, part, part_no)
);
COMMENT ON TABLE streaming.positions IS 'Where each stream reads next in each part of its source (a Kafka partition, a rate source''s partition, a file waiting to be read), written in the batch''s transaction; read it through streaming.source_lag.';

/* One row per committed batch; the newest streaming.progress_history are kept. */
CREATE TABLE streaming.batches (
    stream_id       integer NOT NULL REFERENCES streaming.stream_defs (id) ON DELETE CASCADE,
    batch_id        bigint NOT NULL,
    started_at      timestamptz NOT NULL,
    duration        interval NOT NULL,
    num_input_rows  bigint NOT NULL,
    num_output_rows bigint NOT NULL,
    num_late_rows   bigint NOT NULL DEFAULT 0,
    num_bad_rows    bigint NOT NULL DEFAULT 0,
    num_dedup_rows  bigint NOT NULL DEFAULT 0,
    num_state_rows  bigint NOT NULL DEFAULT 0,
    max_event_time  timestamptz,
    watermark       timestamptz,
    start_positions jsonb NOT NULL,
    end_positions   jsonb NOT NULL,
    data_loss       jsonb,
    -- rows that reached the sink: at commit for a table, as Kafka confirms them for a Kafka sink
    num_delivered_rows bigint NOT NULL DEFAULT 0,
    num_rejected_rows  bigint NOT NULL DEFAULT 0, -- refused by Kafka as too large: in dead_letters
    state_operators jsonb,              -- a join's state per side (SPEC 3.6)
    PRIMARY KEY (stream_id, batch_id)
);

CREATE TABLE streaming.dead_letters (
    id          bigserial PRIMARY KEY,
    stream      text NOT NULL,
    source      text NOT NULL,
    position    jsonb NOT NULL,
    raw         bytea,
    error       text NOT NULL,
    sqlstate    text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    -- a record belongs to its stream by id: a later stream of the same name sees none
    stream_id   integer NOT NULL REFERENCES streaming.stream_defs (id) ON DELETE CASCADE,
    -- raw holds at most the first 64 kB; these describe the whole record
    raw_length  bigint,
    raw_sha256  bytea
);
CREATE INDEX ON streaming.dead_letters (stream_id);
COMMENT ON TABLE streaming.dead_letters IS 'Records that could not be parsed or converted, written in the batch''s transaction.';

CREATE TABLE streaming.late_rows (
    id          bigserial PRIMARY KEY,
    stream      text NOT NULL,
    position    jsonb NOT NULL,
    event_time  timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    stream_id   integer NOT NULL REFERENCES streaming.stream_defs (id) ON DELETE CASCADE
);
CREATE INDEX ON streaming.late_rows (stream_id);
COMMENT ON TABLE streaming.late_rows IS 'Rows a stateful stream dropped as late (late_rows => ''keep''), written in the batch''s transaction.';

/*
 * The Kafka sink's outbox (SPEC 6.1): a batch's messages, written in the
 * batch's transaction and deleted once Kafka confirmed them; in (batch_id,
 * seq) order they are produced.  They are stored several to a row
 * (src/outbox.c: a run of one batch's seqs in one bytea of about a page),
 * as a row per message cost more than the table sink's whole row; the view
 * streaming.outbox shows one row per message.  No foreign key to the
 * stream: drop_stream deletes the stream's rows itself.
 */
CREATE TABLE streaming.outbox_chunks (
    stream_id   integer NOT NULL,
    batch_id    bigint NOT NULL,
    first_seq   bigint NOT NULL,    -- seq of its first message; seqs count from 0 in each batch
    nmsgs       integer NOT NULL,   -- its messages: seqs first_seq .. first_seq + nmsgs - 1
    messages    bytea NOT NULL,     -- each: the key, then the value, as a length (-1: none) and bytes
    PRIMARY KEY (stream_id, batch_id, first_seq)
) WITH (toast_tuple_target = 8160);
-- a chunk of about a page stays in its row, and is not compressed again
ALTER TABLE streaming.outbox_chunks ALTER COLUMN messages SET STORAGE EXTERNAL;
/*
 * On a server with lz4, a chunk is compressed in its row instead (a third
 * of the bytes for JSON rows): the outbox writes and WAL-logs that much
 * less, and touches that many fewer shared buffers.  Without lz4 it stays
 * as above: pglz would cost more CPU than the bytes it saves.
 */
DO $$
BEGIN
    ALTER TABLE streaming.outbox_chunks ALTER COLUMN messages SET COMPRESSION lz4;
    ALTER TABLE streaming.outbox_chunks ALTER COLUMN messages SET STORAGE MAIN;
    ALTER TABLE streaming.outbox_chunks SET (toast_tuple_target = 128);
EXCEPTION WHEN feature_not_supported THEN
    NULL;
END $$;
COMMENT ON TABLE streaming.outbox_chunks IS 'Messages of committed batches that their Kafka sink has not delivered yet, several to a row; streaming.outbox shows them one to a row.';

CREATE FUNCTION streaming.outbox_messages(chunk bytea, OUT ord integer, OUT key bytea, OUT value bytea)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'streaming_outbox_messages'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION streaming.outbox_messages IS 'The messages of a row of streaming.outbox_chunks, in order.';

CREATE VIEW streaming.outbox WITH (security_invoker = true) AS
SELECT s.name AS stream, c.batch_id, c.first_seq + m.ord AS seq, m.key, m.value,
       jsonb_build_object('streaming-stream', s.name, 'streaming-batch-id', c.batch_id::text,
                          'streaming-seq', (c.first_seq + m.ord)::text) AS headers,
       c.stream_id
FROM streaming.outbox_chunks c
JOIN streaming.stream_defs s ON s.id = c.stream_id
CROSS JOIN LATERAL streaming.outbox_messages(c.messages) m;
COMMENT ON VIEW streaming.outbox IS 'Messages of committed batches that their Kafka sink has not delivered yet, with the headers they are produced with.';

SELECT pg_catalog.pg_extension_config_dump('streaming.late_rows', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.late_rows_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.sources', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.stream_defs', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.stream_defs_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.positions', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.batches', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.dead_letters', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.dead_letters_id_seq', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.sinks', '');
SELECT pg_catalog.pg_extension_config_dump('streaming.outbox_chunks', '');

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
 * Who may do what (SPEC 7).  The catalog tables belong to the extension's
 * owner, and only that role changes them: the extension's functions check
 * what the caller may do, then write as the owner (src/catalog.c).  Other
 * roles may only read, and row-level security shows each role the sources
 * and streams it owns (kafka_options may hold credentials) and their
 * positions, history, dead letters and late rows; superusers see everything.
 */
ALTER TABLE streaming.sources ENABLE ROW LEVEL SECURITY;
ALTER TABLE streaming.stream_defs ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_only ON streaming.sources FOR SELECT
    USING (pg_has_role(current_user, owner, 'USAGE'));
CREATE POLICY owner_only ON streaming.stream_defs FOR SELECT
    USING (pg_has_role(current_user, owner, 'USAGE'));
-- positions, history, dead letters and late rows follow the visibility of their stream
ALTER TABLE streaming.positions ENABLE ROW LEVEL SECURITY;
ALTER TABLE streaming.batches ENABLE ROW LEVEL SECURITY;
ALTER TABLE streaming.dead_letters ENABLE ROW LEVEL SECURITY;
ALTER TABLE streaming.late_rows ENABLE ROW LEVEL SECURITY;
CREATE POLICY stream_owner_only ON streaming.late_rows FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
CREATE POLICY stream_owner_only ON streaming.positions FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
CREATE POLICY stream_owner_only ON streaming.batches FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
CREATE POLICY stream_owner_only ON streaming.dead_letters FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
-- sinks as sources (kafka_options may hold credentials), the outbox as its stream
ALTER TABLE streaming.sinks ENABLE ROW LEVEL SECURITY;
ALTER TABLE streaming.outbox_chunks ENABLE ROW LEVEL SECURITY;
CREATE POLICY owner_only ON streaming.sinks FOR SELECT
    USING (pg_has_role(current_user, owner, 'USAGE'));
CREATE POLICY stream_owner_only ON streaming.outbox_chunks FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
GRANT USAGE ON SCHEMA streaming TO PUBLIC;
GRANT SELECT ON streaming.sources, streaming.stream_defs, streaming.positions,
    streaming.batches, streaming.dead_letters, streaming.late_rows TO PUBLIC;
GRANT SELECT ON streaming.sinks, streaming.outbox_chunks, streaming.outbox TO PUBLIC;
-- the sequences are the owner's alone (explicitly, as in an upgraded install)
REVOKE ALL ON SEQUENCE streaming.stream_defs_id_seq, streaming.dead_letters_id_seq,
    streaming.late_rows_id_seq FROM PUBLIC;

/*
 * File sources' positions: every file a stream has read, with the batch that
 * read it (written in that batch's transaction), and the files it will never
 * read (batch_id NULL: older than max_file_age when the stream first saw
 * them).  A file is read once: a name listed here is never read again.  The
 * files waiting to be read are in streaming.positions (part = the file name,
 * at position 0 of end_position = its size), so that source_lag lists them.
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

/* Sources ------------------------------------------------------------------ */

CREATE FUNCTION streaming.create_kafka_source(
    name text,
    bootstrap_servers text,
    topics text[] DEFAULT NULL,
    topic_pattern text DEFAULT NULL,
    partitions jsonb DEFAULT NULL,
    starting_offsets text DEFAULT 'latest',
    format text DEFAULT 'json',
    columns text DEFAULT NULL,
    max_offsets_per_trigger bigint DEFAULT NULL,
    min_offsets_per_trigger bigint DEFAULT NULL,
    max_trigger_delay interval DEFAULT '15 minutes',
    fail_on_data_loss boolean DEFAULT true,
    include_headers boolean DEFAULT false,
    on_bad_record text DEFAULT 'dead_letter',
    kafka_options jsonb DEFAULT '{}',
    schema_registry jsonb DEFAULT NULL,
    envelope text DEFAULT NULL,
    key_format text DEFAULT NULL,
    share text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_kafka_source'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_kafka_source IS 'Define a Kafka source and the view of its columns.';

CREATE FUNCTION streaming.create_rate_source(
    name text,
    rows_per_second bigint,
    num_partitions integer DEFAULT 1,
    ramp_up_time interval DEFAULT '0')
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_rate_source'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_rate_source IS 'Define a rate source (values 0, 1, 2, ... at rows_per_second) and the view of its columns.';

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

CREATE FUNCTION streaming.drop_source(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_drop_source'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

/* Sinks -------------------------------------------------------------------- */

CREATE FUNCTION streaming.create_kafka_sink(
    name text,
    bootstrap_servers text,
    topic text,
    format text DEFAULT 'json',
    key_columns text[] DEFAULT NULL,
    kafka_options jsonb DEFAULT '{}',
    schema_registry jsonb DEFAULT NULL,
    key_format text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_kafka_sink'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_kafka_sink IS 'Define a Kafka sink: streams that name it as their sink write their rows to the topic, through streaming.outbox.';

CREATE FUNCTION streaming.drop_kafka_sink(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_drop_kafka_sink'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

/* Streams ------------------------------------------------------------------ */

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
    watermarks jsonb DEFAULT NULL,
    multiple_watermark_policy text DEFAULT 'min',
    key_columns text[] DEFAULT NULL,
    parallel_workers integer DEFAULT NULL,
    start boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_stream IS 'Define a stream: a query over one source (or two joined) whose results go into a sink.';

CREATE FUNCTION streaming.alter_stream(name text, parallel_workers integer DEFAULT NULL,
    reset text[] DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_alter_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.alter_stream IS 'Change settings of a stream (NULL: unchanged; reset: back to the default); a running stream takes them at its next batch.';

CREATE FUNCTION streaming.drop_stream(name text, drop_sink boolean DEFAULT false,
    force boolean DEFAULT false)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_drop_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;

CREATE FUNCTION streaming.start(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_start'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION streaming.stop(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_stop'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION streaming.reset(name text)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_reset'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

CREATE FUNCTION streaming.run_batch(name text)
RETURNS bigint
AS 'MODULE_PATHNAME', 'streaming_run_batch'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.run_batch IS 'Run one batch of the stream in this session and transaction; returns its batch id, or NULL when there was nothing to do.';

CREATE FUNCTION streaming.process_available(name text, timeout interval DEFAULT '60s')
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_process_available'
LANGUAGE C CALLED ON NULL INPUT VOLATILE
SET search_path = pg_catalog, pg_temp;

/*
 * Window calls (SPEC 3): valid in a stream query's GROUP BY (window_start()
 * and window_end() in its select list); called anywhere else they raise an
 * error.  VOLATILE so that the planner never folds them.
 */
CREATE FUNCTION streaming.tumble(ts timestamptz, size interval,
    origin timestamptz DEFAULT '1970-01-01 00:00:00+00')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'streaming_tumble'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION streaming.tumble IS 'Tumbling window [start, start + size) of ts, aligned like date_bin; only in a stream''s GROUP BY.';

CREATE FUNCTION streaming.hop(ts timestamptz, size interval, slide interval,
    origin timestamptz DEFAULT '1970-01-01 00:00:00+00')
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'streaming_hop'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION streaming.hop IS 'Sliding windows of size, one every slide; only in a stream''s GROUP BY.';

CREATE FUNCTION streaming.session(ts timestamptz, gap interval)
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'streaming_session'
LANGUAGE C VOLATILE;
COMMENT ON FUNCTION streaming.session IS 'Session windows closed by a gap of inactivity; only in a stream''s GROUP BY.';

CREATE FUNCTION streaming.window_start()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'streaming_window_start'
LANGUAGE C VOLATILE;

CREATE FUNCTION streaming.window_end()
RETURNS timestamptz
AS 'MODULE_PATHNAME', 'streaming_window_end'
LANGUAGE C VOLATILE;

/* Monitoring --------------------------------------------------------------- */

CREATE FUNCTION streaming.worker_pids(OUT stream_id integer, OUT pid integer, OUT problem text)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'streaming_worker_pids'
LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION streaming.worker_pids IS 'The caller''s streams that should run: their worker (NULL while none) and why none runs.';

-- every kind's parts alike: a part's lag is its end position minus its position
CREATE VIEW streaming.source_lag WITH (security_invoker = true) AS
SELECT s.name AS stream, p.part AS topic, p.part_no AS partition,
       p.position AS committed_offset, p.end_position AS high_watermark,
       greatest(coalesce(p.end_position, p.position) - p.position, 0) AS lag,
       p.source
FROM streaming.positions p JOIN streaming.stream_defs s ON s.id = p.stream_id;

CREATE VIEW streaming.streams WITH (security_invoker = true) AS
SELECT s.name, s.source || coalesce(', ' || s.other_source, '') AS source,
       coalesce(s.sink_name, s.sink::text) AS sink, s.output_mode, s.trigger,
       -- running without a worker: waiting for one, and source_error says why
       CASE WHEN s.status = 'running' AND w.pid IS NULL AND w.problem IS NOT NULL
            THEN 'waiting' ELSE s.status END AS status,
       w.pid AS worker_pid, s.last_batch_id,
       CASE WHEN s.watermark_delay IS NOT NULL OR s.watermarks IS NOT NULL
            THEN coalesce(s.watermark, 'epoch'::timestamptz) END AS watermark,
       s.last_error, coalesce(s.source_error, w.problem) AS source_error,
       (SELECT sum(l.lag)::bigint FROM streaming.source_lag l WHERE l.stream = s.name) AS lag,
       -- a Kafka sink's messages not delivered yet
       CASE WHEN s.sink_name IS NOT NULL
            THEN (SELECT coalesce(sum(o.nmsgs), 0)::bigint FROM streaming.outbox_chunks o WHERE o.stream_id = s.id) END AS outbox_rows
FROM streaming.stream_defs s
LEFT JOIN streaming.worker_pids() w ON w.stream_id = s.id;

CREATE VIEW streaming.progress WITH (security_invoker = true) AS
SELECT s.name AS stream, b.batch_id, b.started_at, b.duration,
       b.num_input_rows,
       -- as Spark: input rate over the time since the previous batch started
       b.num_input_rows / nullif(extract(epoch FROM b.started_at - lag(b.started_at)
           OVER (PARTITION BY b.stream_id ORDER BY b.batch_id)), 0) AS input_rows_per_second,
       b.num_input_rows / nullif(extract(epoch FROM b.duration), 0) AS processed_rows_per_second,
       b.num_output_rows, b.num_late_rows, b.num_bad_rows, b.num_dedup_rows, b.num_state_rows,
       b.max_event_time, b.watermark, b.start_positions, b.end_positions, b.data_loss,
       b.num_delivered_rows, b.num_rejected_rows, b.state_operators
FROM streaming.batches b JOIN streaming.stream_defs s ON s.id = b.stream_id;

GRANT SELECT ON streaming.streams, streaming.progress, streaming.source_lag TO PUBLIC;

CREATE VIEW streaming.processed_files WITH (security_invoker = true) AS
SELECT s.name AS stream, f.file_name, f.size, f.mtime, f.batch_id, f.processed_at
FROM streaming.files f JOIN streaming.stream_defs s ON s.id = f.stream_id
WHERE f.batch_id IS NOT NULL;
GRANT SELECT ON streaming.processed_files TO PUBLIC;

/* Past one server (SPEC 8) --------------------------------------------------
 * A Kafka source's share of the partitions, changed while its streams are
 * stopped; a stream's share moved to another server with its positions and
 * state; the partial states of aggregate streams, read and combined on
 * another server through postgres_fdw (src/scaleout.c, src/combine.c).
 */
CREATE FUNCTION streaming.alter_kafka_source(name text, share text DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_alter_kafka_source'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.alter_kafka_source IS 'Change a Kafka source''s share of the partitions while its streams are stopped; their positions are kept.';

CREATE FUNCTION streaming.export_share(stream text, share text DEFAULT NULL)
RETURNS jsonb
AS 'MODULE_PATHNAME', 'streaming_export_share'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.export_share IS 'Take a stopped stream''s positions in share (or, without share, all its positions, watermark and partial states) away from this server, for import_share on another.';

CREATE FUNCTION streaming.import_share(stream text, data jsonb)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_import_share'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.import_share IS 'Give a stopped stream what export_share took from the same stream on another server: its positions, and its partial states combined into this one''s.';

CREATE FUNCTION streaming.partial_state_layout(stream_id integer,
    OUT state_table text, OUT layout jsonb)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'streaming_partial_state_layout'
LANGUAGE C STRICT STABLE;
COMMENT ON FUNCTION streaming.partial_state_layout IS 'The state table and the layout of its partial states of an aggregate stream the caller owns (streaming.partial_states).';

CREATE VIEW streaming.partial_states WITH (security_invoker = true) AS
SELECT s.name AS stream, l.state_table, l.layout
FROM streaming.stream_defs s, LATERAL streaming.partial_state_layout(s.id) l;
COMMENT ON VIEW streaming.partial_states IS 'Per aggregate stream: the table in schema streaming that holds its groups'' partial states, and their layout, for combine_view on another server.';
GRANT SELECT ON streaming.partial_states TO PUBLIC;

CREATE FUNCTION streaming.combine_partial_step(internal, regprocedure, regtype[], "any", text, anyelement)
RETURNS internal
AS 'MODULE_PATHNAME', 'streaming_combine_partial_step'
LANGUAGE C CALLED ON NULL INPUT IMMUTABLE;
CREATE FUNCTION streaming.combine_partial_final(internal, regprocedure, regtype[], "any", text, anyelement)
RETURNS anyelement
AS 'MODULE_PATHNAME', 'streaming_combine_partial_final'
LANGUAGE C CALLED ON NULL INPUT IMMUTABLE;
CREATE AGGREGATE streaming.combine_partial(aggregate regprocedure, argument_types regtype[], state "any",
                                           server text, result anyelement) (
    SFUNC = streaming.combine_partial_step,
    STYPE = internal,
    FINALFUNC = streaming.combine_partial_final,
    FINALFUNC_EXTRA);
COMMENT ON AGGREGATE streaming.combine_partial(regprocedure, regtype[], "any", text, anyelement) IS 'The partial states of aggregate (with these argument types) combined and finalized into a value of result''s type; server names where a state came from, for errors.';

CREATE FUNCTION streaming.combine_view(name text, stream text, servers text[])
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_combine_view'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.combine_view IS 'Create a view of a stream''s results over the partial states of the same stream on several servers (postgres_fdw), combined with the aggregates'' own functions.';
