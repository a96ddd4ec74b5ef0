/*
 * streaming 0.2.0 -> 0.3.0: the Kafka sink's outbox stores several messages
 * to a row (src/outbox.c): a row per message cost more than the table
 * sink's whole row.  streaming.outbox becomes a view of
 * streaming.outbox_chunks that shows one message to a row, with the stream's
 * name first, as SPEC 6.1 lists its columns.  Messages waiting in the old
 * outbox move into chunks of one message each, so that none is lost; their
 * headers were always (stream, batch id, seq), which the view and the
 * producer make from the row.
 */
\echo Use "ALTER EXTENSION streaming UPDATE" to load this file. \quit

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
COMMENT ON TABLE streaming.outbox_chunks IS 'Messages of committed batches that their Kafka sink has not delivered yet, several to a row; streaming.outbox shows them one to a row.';

-- what waits in the old outbox: a chunk of one message each (lengths are 4-byte big-endian)
INSERT INTO streaming.outbox_chunks (stream_id, batch_id, first_seq, nmsgs, messages)
SELECT stream_id, batch_id, seq, 1,
       int4send(coalesce(octet_length(key), -1)) || coalesce(key, ''::bytea) ||
       int4send(coalesce(octet_length(value), -1)) || coalesce(value, ''::bytea)
FROM streaming.outbox;

CREATE FUNCTION streaming.outbox_messages(chunk bytea, OUT ord integer, OUT key bytea, OUT value bytea)
RETURNS SETOF record
AS 'MODULE_PATHNAME', 'streaming_outbox_messages'
LANGUAGE C STRICT IMMUTABLE PARALLEL SAFE;
COMMENT ON FUNCTION streaming.outbox_messages IS 'The messages of a row of streaming.outbox_chunks, in order.';

-- streams counts the chunks' messages
CREATE OR REPLACE VIEW streaming.streams WITH (security_invoker = true) AS
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
            THEN (SELECT coalesce(sum(o.nmsgs), 0)::bigint FROM streaming.outbox_chunks o WHERE o.stream_id = s.id) END AS outbox_rows
FROM streaming.stream_defs s
LEFT JOIN streaming.worker_pids() w ON w.stream_id = s.id;

-- the old table goes, out of pg_dump's configuration tables first
ALTER EXTENSION streaming DROP TABLE streaming.outbox;
DROP TABLE streaming.outbox;

CREATE VIEW streaming.outbox WITH (security_invoker = true) AS
SELECT s.name AS stream, c.batch_id, c.first_seq + m.ord AS seq, m.key, m.value,
       jsonb_build_object('streaming-stream', s.name, 'streaming-batch-id', c.batch_id::text,
                          'streaming-seq', (c.first_seq + m.ord)::text) AS headers,
       c.stream_id
FROM streaming.outbox_chunks c
JOIN streaming.stream_defs s ON s.id = c.stream_id
CROSS JOIN LATERAL streaming.outbox_messages(c.messages) m;
COMMENT ON VIEW streaming.outbox IS 'Messages of committed batches that their Kafka sink has not delivered yet, with the headers they are produced with.';

SELECT pg_catalog.pg_extension_config_dump('streaming.outbox_chunks', '');
-- the outbox as its stream: its owner's rows only
ALTER TABLE streaming.outbox_chunks ENABLE ROW LEVEL SECURITY;
CREATE POLICY stream_owner_only ON streaming.outbox_chunks FOR SELECT
    USING (stream_id IN (SELECT id FROM streaming.stream_defs));
GRANT SELECT ON streaming.outbox_chunks, streaming.outbox TO PUBLIC;
