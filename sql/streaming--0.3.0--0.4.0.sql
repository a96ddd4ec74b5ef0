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
 * Joins of two sources (SPEC 3.6).  A stream may read a second source
 * (other_source), each side with its watermark (watermarks, the policy
 * that combines them, and per side what batches learnt: side_watermarks);
 * positions belong to a source of the stream (source, in the key), so that
 * two sources' parts never meet; progress shows a join's state per side.
 * create_stream takes watermarks and multiple_watermark_policy.
 */
ALTER TABLE streaming.positions ADD COLUMN source text;
UPDATE streaming.positions p SET source = s.source FROM streaming.stream_defs s WHERE s.id = p.stream_id;
ALTER TABLE streaming.positions ALTER COLUMN source SET NOT NULL;
ALTER TABLE streaming.positions DROP CONSTRAINT positions_pkey;
ALTER TABLE streaming.positions ADD CONSTRAINT positions_pkey PRIMARY KEY (stream_id, source, part, part_no);
ALTER TABLE streaming.stream_defs
    ADD COLUMN other_source text REFERENCES streaming.sources (name),
    ADD COLUMN watermarks jsonb,
    ADD COLUMN multiple_watermark_policy text NOT NULL DEFAULT 'min'
        CHECK (multiple_watermark_policy IN ('min', 'max')),
    ADD COLUMN side_watermarks jsonb;
-- parallel_workers NULL: automatic (SPEC 3.4); existing streams keep their number
ALTER TABLE streaming.stream_defs
    ALTER COLUMN parallel_workers DROP NOT NULL,
    ALTER COLUMN parallel_workers DROP DEFAULT;
ALTER TABLE streaming.batches ADD COLUMN state_operators jsonb;
-- alter_stream(reset => ARRAY['parallel_workers']): back to automatic
DROP FUNCTION streaming.alter_stream(text, integer);
CREATE FUNCTION streaming.alter_stream(name text, parallel_workers integer DEFAULT NULL,
    reset text[] DEFAULT NULL)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_alter_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.alter_stream IS 'Change settings of a stream (NULL: unchanged; reset: back to the default); a running stream takes them at its next batch.';

CREATE OR REPLACE VIEW streaming.source_lag WITH (security_invoker = true) AS
SELECT s.name AS stream, p.part AS topic, p.part_no AS partition,
       p.position AS committed_offset, p.end_position AS high_watermark,
       greatest(coalesce(p.end_position, p.position) - p.position, 0) AS lag,
       p.source
FROM streaming.positions p JOIN streaming.stream_defs s ON s.id = p.stream_id;

CREATE OR REPLACE VIEW streaming.streams WITH (security_invoker = true) AS
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

CREATE OR REPLACE VIEW streaming.progress WITH (security_invoker = true) AS
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

DROP FUNCTION streaming.create_stream(text, text, text, text, interval, text, text[], boolean, text,
                                      regprocedure, text, interval, boolean, integer);
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
    parallel_workers integer DEFAULT NULL,
    start boolean DEFAULT true)
RETURNS void
AS 'MODULE_PATHNAME', 'streaming_create_stream'
LANGUAGE C CALLED ON NULL INPUT VOLATILE;
COMMENT ON FUNCTION streaming.create_stream IS 'Define a stream: a query over one source (or two joined) whose results go into a sink.';

/*
 * Avro with a schema registry, Debezium's change events and upsert mode
 * (SPEC 2.1.1, 2.1.2, 3.2).  create_kafka_source takes schema_registry
 * (its basic_auth a credential, kept in the source's options like
 * kafka_options), envelope and key_format; create_kafka_sink takes
 * schema_registry and key_format; create_stream takes key_columns, the
 * sink's key in output_mode 'upsert', which stream_defs keeps.  A
 * function's arguments cannot change in place: each is made again.
 */
ALTER TABLE streaming.stream_defs ADD COLUMN key_columns text[];

-- An aggregate's and dedup's state rows, counted on from batch to batch
-- (per state table, by OID) rather than counted in every batch.
ALTER TABLE streaming.stream_defs ADD COLUMN state_rows jsonb;

-- Past one server (SPEC 8, issue 22): status 'moved', create_kafka_source's share,
-- and the functions and view below.
ALTER TABLE streaming.stream_defs DROP CONSTRAINT stream_defs_status_check,
    ADD CONSTRAINT stream_defs_status_check
    CHECK (status IN ('running', 'waiting', 'stopped', 'failed', 'finished', 'moved'));
DROP FUNCTION streaming.create_kafka_source(text, text, text[], text, jsonb, text, text, text,
    bigint, bigint, interval, boolean, boolean, text, jsonb);
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

DROP FUNCTION streaming.create_kafka_sink(text, text, text, text, text[], jsonb);
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

DROP FUNCTION streaming.create_stream(text, text, text, text, interval, text, text[], boolean,
    text, regprocedure, text, interval, jsonb, text, integer, boolean);
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
