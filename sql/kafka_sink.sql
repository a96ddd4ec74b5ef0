--
-- kafka_sink: streaming.create_kafka_sink and the streams that write to it
-- (SPEC 6.1): every argument and its errors (nothing left behind), the
-- messages a batch writes into streaming.outbox (keys, values in each
-- format, headers, update and complete mode, tombstones), the outbox's
-- bound, and delivery by the stream's worker, read back from the topic with
-- kcat: the same keys, values and headers, in order; delivered rows in
-- progress, messages too large for the topic in dead_letters, drop_stream's
-- force and reset.  Outages, crashes and a topic that refuses us are in
-- test/t/017_kafka_sink.pl and 018_kafka_sink_outage.pl.
--
-- Environment: KAFKA_BOOTSTRAP (the broker), KAFKA_RUN_ID (optional suffix
-- of every topic name, taken out of what this test prints).  Input records
-- go to partition 0 of topics created by the first record produced to them.
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\i test/regress_helpers.sql
SET stm.run = :'run';
-- the outbox as text (keys and values are UTF-8 here)
CREATE VIEW ksk_outbox AS
SELECT s.name AS stream, o.batch_id, o.seq, convert_from(o.key, 'UTF8') AS key,
       convert_from(o.value, 'UTF8') AS value, o.headers
FROM streaming.outbox o JOIN streaming.stream_defs s ON s.id = o.stream_id;
-- ksk_read(topic): every message of the topic, with its headers, read by kcat
CREATE TEMP TABLE ksk_lines (line text);
CREATE FUNCTION ksk_read(topic text)
RETURNS TABLE (stream text, batch_id bigint, seq bigint, key text, value text, headers jsonb,
               part int, off bigint)
LANGUAGE plpgsql AS $$
BEGIN
    TRUNCATE ksk_lines;
    -- one JSON envelope a line; read as single-field CSV that never quotes
    EXECUTE format($c$COPY ksk_lines FROM PROGRAM %L WITH (FORMAT csv, QUOTE e'\x01', DELIMITER e'\x02')$c$,
                   'kcat -C -b "$KAFKA_BOOTSTRAP" -t ' || topic || ' -e -J -q');
    RETURN QUERY
    WITH m AS (SELECT line::jsonb AS j FROM ksk_lines),
    h AS (SELECT j, (SELECT jsonb_object_agg(j->'headers'->>(2 * i), j->'headers'->>(2 * i + 1))
                     FROM generate_series(0, jsonb_array_length(j->'headers') / 2 - 1) i) AS hs
          FROM m)
    SELECT hs->>'streaming-stream', (hs->>'streaming-batch-id')::bigint, (hs->>'streaming-seq')::bigint,
           j->>'key', j->>'payload', hs, (j->>'partition')::int, (j->>'offset')::bigint
    FROM h;
END $$;

\set t ksk_in:run
\! printf '%s\n' '{"id": 1, "name": "one", "amount": 1.50, "ok": true, "ts": "2024-05-01T12:00:00Z", "doc": {"a": [1, 2]}, "k": "a", "bin": "\\x616263"}' '{"id": 2, "name": "quote \" and comma, here", "amount": -3, "ok": false, "ts": "2024-05-01T12:03:00+02:00", "k": "b"}' '{"id": 3, "name": "", "amount": null, "ts": "2024-05-01T12:07:00Z", "k": "a", "bin": "\\x"}' '{"id": 4, "name": "línea\nnueva", "amount": 1e3, "ts": "2024-05-01T12:11:00Z", "k": "c"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ksk_in$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ksk_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest',
    columns => 'id bigint, name text, amount numeric(10,2), ok boolean, ts timestamptz, doc jsonb, k text, bin bytea');

--
-- create_kafka_sink: arguments
--
SELECT stm_error($$SELECT streaming.create_kafka_sink(NULL, 'b:9092', 't')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('', 'b:9092', 't')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink(repeat('x', 64), 'b:9092', 't')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', NULL, 't')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', '', 't')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', NULL)$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 'no spaces')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', '..')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', repeat('t', 250))$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', format => 'avro')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', format => NULL)$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', key_columns => '{}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', key_columns => ARRAY['a', NULL])$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', key_columns => ARRAY['a', ''])$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', key_columns => ARRAY['a', 'a'])$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '[]')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"linger.ms": {"x": 1}}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => NULL)$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"bootstrap.servers": "x:1"}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"enable.idempotence": false}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"acks": "1"}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"message.timeout.ms": 5000}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"no.such.property": 1}')$$);
SELECT stm_error($$SELECT streaming.create_kafka_sink('k', 'b:9092', 't', kafka_options => '{"linger.ms": "soon"}')$$);
-- nothing was left behind
SELECT count(*) AS sinks FROM streaming.sinks;
-- keywords are case-insensitive and stored as normalised; options keep every argument
-- (terse: the WARNING that the topic does not exist yet names it in its
-- detail, with KAFKA_RUN_ID's suffix on a real broker)
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_json', :'bs', 'ksk_json' || :'run', format => 'JSON',
    kafka_options => '{"linger.ms": 1, "compression.type": "lz4"}');
\set VERBOSITY default
SELECT stm_error($$SELECT streaming.create_kafka_sink('ksk_json', 'b:9092', 't')$$);
SELECT name, kind, stm_strip((options - 'bootstrap_servers')::text) AS options, options ? 'bootstrap_servers' AS has_bootstrap, owner FROM streaming.sinks;
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_key1', :'bs', 'ksk_key1' || :'run', key_columns => ARRAY['k']);
SELECT streaming.create_kafka_sink('ksk_keyb', :'bs', 'ksk_keyb' || :'run', key_columns => ARRAY['bin']);
SELECT streaming.create_kafka_sink('ksk_keyn', :'bs', 'ksk_keyn' || :'run', key_columns => ARRAY['k', 'id']);
SELECT streaming.create_kafka_sink('ksk_csv', :'bs', 'ksk_csv' || :'run', format => 'csv');
SELECT streaming.create_kafka_sink('ksk_text', :'bs', 'ksk_text' || :'run', format => 'text', key_columns => ARRAY['id']);
SELECT streaming.create_kafka_sink('ksk_bytes', :'bs', 'ksk_bytes' || :'run', format => 'bytes');
\set VERBOSITY default

--
-- create_stream with a Kafka sink: what the sink needs of the stream's output
--
SELECT stm_error($$SELECT streaming.create_stream('ksk_bad', 'SELECT id, name FROM ksk_src', sink => 'ksk_key1', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('ksk_bad', 'SELECT id, name, k FROM ksk_src', sink => 'ksk_text', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('ksk_bad', 'SELECT id FROM ksk_src', sink => 'ksk_text', start => false)$$);
SELECT stm_error($$SELECT streaming.create_stream('ksk_bad', 'SELECT name FROM ksk_src', sink => 'ksk_bytes', start => false)$$);
-- a sink_function and a Kafka sink exclude each other
CREATE FUNCTION ksk_noop(batch_id bigint, batch regclass) RETURNS void LANGUAGE sql RETURN NULL;
SELECT stm_error($$SELECT streaming.create_stream('ksk_bad', 'SELECT id, name FROM ksk_src', sink => 'ksk_json',
    sink_function => 'ksk_noop(bigint, regclass)', start => false)$$);
DROP FUNCTION ksk_noop(bigint, regclass);
-- a session's tombstone has only the window and group columns: the key must be among them
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_sess_bad', :'bs', 't', key_columns => ARRAY['n']);
\set VERBOSITY default
SELECT stm_error($$SELECT streaming.create_stream('ksk_bad',
    'SELECT streaming.session(ts, ''5 minutes'') AS ws, k, count(*) AS n FROM ksk_src GROUP BY streaming.session(ts, ''5 minutes''), k',
    sink => 'ksk_sess_bad', output_mode => 'update', start => false)$$);
SELECT streaming.drop_kafka_sink('ksk_sess_bad');
-- nothing was left behind
SELECT count(*) AS streams, to_regclass('ksk_bad') AS sink_table FROM streaming.stream_defs WHERE name = 'ksk_bad';

--
-- append mode: one message per row, in the query's order, keyless by default
--
SELECT streaming.create_stream('ksk_json_st', 'SELECT id, name, amount, ok, ts, doc FROM ksk_src',
    sink => 'ksk_json', start => false);
SELECT name, sink, output_mode, status, outbox_rows FROM streaming.streams WHERE name = 'ksk_json_st';
-- no sink table is made for a Kafka sink
SELECT to_regclass('ksk_json_st') AS no_table, to_regclass('ksk_json') AS no_table_either;
SELECT streaming.run_batch('ksk_json_st');
-- json: by column name, numbers and booleans as such, timestamps ISO 8601 with offset, NULL as null
SELECT batch_id, seq, key, value, headers FROM ksk_outbox WHERE stream = 'ksk_json_st' ORDER BY batch_id, seq;
SELECT batch_id, num_output_rows, num_delivered_rows, num_rejected_rows FROM streaming.progress WHERE stream = 'ksk_json_st';
SELECT outbox_rows FROM streaming.streams WHERE name = 'ksk_json_st';
-- stored several to a row (streaming.outbox_chunks): a run of the batch's
-- consecutive seqs in one bytea of at most about a page
SELECT c.batch_id, c.first_seq, c.nmsgs, octet_length(c.messages) <= 7800 AS within_a_page,
       (SELECT count(*) FROM streaming.outbox_messages(c.messages)) = c.nmsgs AS unpacks_to_nmsgs
FROM streaming.outbox_chunks c JOIN streaming.stream_defs s ON s.id = c.stream_id
WHERE s.name = 'ksk_json_st' ORDER BY 1, 2;
-- a batch of 120 messages of about 1 kB: chunks of consecutive seqs, none
-- over the page-sized bound, and the view shows each message once, in order
CREATE TABLE ksk_n AS SELECT n FROM generate_series(1, 30) n;
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_wide', :'bs', 'ksk_wide_t' || current_setting('stm.run'));
\set VERBOSITY default
SELECT streaming.create_stream('ksk_wide_st', $$SELECT s.id, n.n, repeat('y', 1000) AS pad
    FROM ksk_src s CROSS JOIN ksk_n n$$, sink => 'ksk_wide', start => false);
SELECT streaming.run_batch('ksk_wide_st');
WITH c AS (SELECT c.* FROM streaming.outbox_chunks c JOIN streaming.stream_defs s ON s.id = c.stream_id
           WHERE s.name = 'ksk_wide_st')
SELECT count(*) > 1 AS several_chunks, sum(nmsgs) AS messages,
       bool_and(octet_length(messages) <= 7800) AS within_a_page,
       bool_and(first_seq = coalesce((SELECT max(p.first_seq + p.nmsgs) FROM c p WHERE p.first_seq < c.first_seq), 0))
           AS consecutive
FROM c;
SELECT count(*) AS rows, count(DISTINCT seq) AS seqs, min(seq), max(seq),
       bool_and(value::jsonb->>'pad' = repeat('y', 1000)) AS values_whole
FROM ksk_outbox WHERE stream = 'ksk_wide_st';
SELECT streaming.drop_stream('ksk_wide_st', force => true);
SELECT streaming.drop_kafka_sink('ksk_wide');
DROP TABLE ksk_n;
-- the value is PostgreSQL's own JSON of the row: it reads back as the row
SELECT r.id, r.name, r.amount, r.ok, r.ts, r.doc
FROM ksk_outbox, jsonb_populate_record(NULL::ksk_src, value::jsonb) r WHERE stream = 'ksk_json_st' ORDER BY seq;

-- keys: one column as its text, a bytea column as its bytes, several as a JSON object
SELECT streaming.create_stream('ksk_key1_st', 'SELECT id, k FROM ksk_src', sink => 'ksk_key1', start => false);
SELECT streaming.create_stream('ksk_keyb_st', 'SELECT id, bin FROM ksk_src', sink => 'ksk_keyb', start => false);
SELECT streaming.create_stream('ksk_keyn_st', 'SELECT id, k FROM ksk_src', sink => 'ksk_keyn', start => false);
SELECT streaming.run_batch('ksk_key1_st'), streaming.run_batch('ksk_keyb_st'), streaming.run_batch('ksk_keyn_st');
SELECT stream, seq, key, value FROM ksk_outbox WHERE stream IN ('ksk_key1_st', 'ksk_keyn_st') ORDER BY stream, seq;
SELECT seq, o.key AS raw_key, convert_from(o.value, 'UTF8') AS value
FROM streaming.outbox o JOIN streaming.stream_defs s ON s.id = o.stream_id
WHERE s.name = 'ksk_keyb_st' ORDER BY seq;

-- csv: quoted as COPY quotes (NULL empty, an empty string ""); text: the column
-- besides the key in its text form; bytes: a bytea column as it is
SELECT streaming.create_stream('ksk_csv_st', 'SELECT id, name, amount, ok FROM ksk_src', sink => 'ksk_csv', start => false);
SELECT streaming.create_stream('ksk_text_st', 'SELECT id, ts FROM ksk_src', sink => 'ksk_text', start => false);
SELECT streaming.create_stream('ksk_bytes_st', 'SELECT bin FROM ksk_src', sink => 'ksk_bytes', start => false);
SELECT streaming.run_batch('ksk_csv_st'), streaming.run_batch('ksk_text_st'), streaming.run_batch('ksk_bytes_st');
SELECT stream, seq, key, value FROM ksk_outbox WHERE stream IN ('ksk_csv_st', 'ksk_text_st') ORDER BY stream, seq;
SELECT seq, o.key IS NULL AS no_key, o.value IS NULL AS null_value, o.value
FROM streaming.outbox o JOIN streaming.stream_defs s ON s.id = o.stream_id
WHERE s.name = 'ksk_bytes_st' ORDER BY seq;
-- the csv lines read back as the rows, with PostgreSQL's CSV parser
CREATE TEMP TABLE ksk_csv_back (id bigint, name text, amount numeric(10,2), ok boolean);
SELECT lo_from_bytea(0, string_agg(o.value, '\x0a'::bytea ORDER BY o.seq)) AS csv_lo
FROM streaming.outbox o JOIN streaming.stream_defs s ON s.id = o.stream_id WHERE s.name = 'ksk_csv_st' \gset
SELECT lo_export(:csv_lo, 'ksk_csv_back.csv'), lo_unlink(:csv_lo);
COPY ksk_csv_back FROM 'ksk_csv_back.csv' WITH (FORMAT csv);
SELECT *, name IS NULL AS null_name FROM ksk_csv_back ORDER BY id;

--
-- update mode: one message per changed group on its key (window start and
-- groups, a JSON object by default); complete mode: every row after every
-- batch; sessions merged away: a tombstone on their key
--
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_agg', :'bs', 'ksk_agg' || :'run');
\set VERBOSITY default
SELECT streaming.create_stream('ksk_upd', $$SELECT streaming.window_start() AS ws, k, count(*) AS n, sum(amount) AS total
    FROM ksk_src GROUP BY streaming.tumble(ts, '10 minutes'), k$$,
    sink => 'ksk_agg', output_mode => 'update', start => false);
SELECT streaming.create_stream('ksk_cmp', $$SELECT k, count(*) AS n FROM ksk_src GROUP BY k$$,
    sink => 'ksk_agg', output_mode => 'complete', start => false);
SELECT streaming.create_stream('ksk_ses', $$SELECT streaming.session(ts, '5 minutes') AS ws, streaming.window_end() AS we,
    k, count(*) AS n FROM ksk_src GROUP BY streaming.session(ts, '5 minutes'), k$$,
    sink => 'ksk_agg', output_mode => 'update', start => false);
SELECT streaming.run_batch('ksk_upd'), streaming.run_batch('ksk_cmp'), streaming.run_batch('ksk_ses');
-- a second batch: group a of the first window changes, a new session of a
-- (12:04) merges the sessions of 12:00 and 12:07
\! printf '%s\n' '{"id": 5, "amount": 10, "ts": "2024-05-01T12:04:00Z", "k": "a"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ksk_in$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ksk_upd'), streaming.run_batch('ksk_cmp'), streaming.run_batch('ksk_ses');
SELECT stream, batch_id, seq, key, value FROM ksk_outbox WHERE stream IN ('ksk_upd', 'ksk_cmp', 'ksk_ses')
ORDER BY stream, batch_id, seq;
-- read as "last value per key" (a compacted topic), each stream's messages
-- equal what a table sink of the same stream holds
SELECT stream, key, value FROM (
    SELECT DISTINCT ON (stream, key) stream, key, value FROM ksk_outbox
    WHERE stream IN ('ksk_upd', 'ksk_ses') ORDER BY stream, key, batch_id DESC, seq DESC) last
WHERE value IS NOT NULL ORDER BY stream, key;

-- dedup and a join with a table, into a Kafka sink as into a table
CREATE TABLE ksk_labels (k text PRIMARY KEY, label text);
INSERT INTO ksk_labels VALUES ('a', 'first'), ('b', 'second');
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_misc', :'bs', 'ksk_misc' || :'run', key_columns => ARRAY['k']);
\set VERBOSITY default
SELECT streaming.create_stream('ksk_join', $$SELECT s.k, s.id, l.label FROM ksk_src s LEFT JOIN ksk_labels l ON l.k = s.k$$,
    sink => 'ksk_misc', dedup_keys => ARRAY['k'], start => false);
SELECT streaming.run_batch('ksk_join');
SELECT seq, key, value FROM ksk_outbox WHERE stream = 'ksk_join' ORDER BY seq;

--
-- the outbox's bound (streaming.outbox_max_rows): a batch reads no more
-- records than the outbox has room for; when it is full, no batch runs; a
-- batch that writes more rows than that anyway fails
--
SET streaming.outbox_max_rows = 8;
-- ksk_json_st holds 4 rows: room for 4 records of the 5
\! printf '%s\n' '{"id": 6, "k": "d", "ts": "2024-05-01T13:00:00Z"}' '{"id": 7, "k": "d", "ts": "2024-05-01T13:01:00Z"}' '{"id": 8, "k": "d", "ts": "2024-05-01T13:02:00Z"}' '{"id": 9, "k": "d", "ts": "2024-05-01T13:03:00Z"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ksk_in$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ksk_json_st');
SELECT batch_id, num_input_rows, stm_strip(end_positions::text) AS end_positions
FROM streaming.progress WHERE stream = 'ksk_json_st' ORDER BY batch_id;
SELECT outbox_rows FROM streaming.streams WHERE name = 'ksk_json_st';
SELECT stm_error($$SELECT streaming.run_batch('ksk_json_st')$$);
-- complete mode writes every group: 2 records (group d) make 4 rows, but
-- the 6 rows waiting leave room for 2: the batch waits for the delivery
SELECT stm_error($$SELECT streaming.run_batch('ksk_cmp')$$);
SELECT count(*) AS still_6 FROM ksk_outbox WHERE stream = 'ksk_cmp';
-- hopping windows write a row per window: 5 records make more than 5 rows,
-- and with nothing waiting such a batch can never fit
SELECT streaming.create_stream('ksk_hop', $$SELECT streaming.window_start() AS ws, count(*) AS n
    FROM ksk_src GROUP BY streaming.hop(ts, '1 hour', '10 minutes')$$,
    sink => 'ksk_agg', output_mode => 'update', start => false);
SET streaming.outbox_max_rows = 5;
SELECT stm_error($$SELECT streaming.run_batch('ksk_hop')$$);
SELECT count(*) AS nothing_written FROM ksk_outbox WHERE stream = 'ksk_hop';
RESET streaming.outbox_max_rows;

--
-- delivery: the streams' workers produce the outbox's rows and delete them
-- as Kafka confirms them; the topic then holds the same messages, in order
--
CREATE TEMP TABLE ksk_sent AS SELECT * FROM ksk_outbox;
SELECT streaming.start(name) FROM streaming.streams WHERE name LIKE 'ksk\_%' AND name <> 'ksk_hop' ORDER BY name;
-- process_available waits for the outbox to be delivered too
SELECT count(*) AS delivered FROM (SELECT streaming.process_available(name, '60s') FROM streaming.streams
    WHERE name LIKE 'ksk\_%' AND name <> 'ksk_hop' ORDER BY name) p;
SELECT name, outbox_rows FROM streaming.streams WHERE name LIKE 'ksk\_%' AND name <> 'ksk_hop' AND outbox_rows > 0;
SELECT streaming.stop(name) FROM streaming.streams WHERE name LIKE 'ksk\_%' ORDER BY name;
-- the rows written above are on their topics with the same key, value and
-- headers, each once, in each stream's (batch id, seq) order
CREATE TEMP TABLE ksk_got AS
SELECT * FROM ksk_read('ksk_json' || :'run') UNION ALL SELECT * FROM ksk_read('ksk_key1' || :'run')
UNION ALL SELECT * FROM ksk_read('ksk_keyn' || :'run') UNION ALL SELECT * FROM ksk_read('ksk_csv' || :'run')
UNION ALL SELECT * FROM ksk_read('ksk_text' || :'run') UNION ALL SELECT * FROM ksk_read('ksk_agg' || :'run')
UNION ALL SELECT * FROM ksk_read('ksk_keyb' || :'run') UNION ALL SELECT * FROM ksk_read('ksk_bytes' || :'run')
UNION ALL SELECT * FROM ksk_read('ksk_misc' || :'run');
SELECT (SELECT count(*) FROM (SELECT stream, batch_id, seq, key, value, headers FROM ksk_sent
                              EXCEPT ALL SELECT stream, batch_id, seq, key, value, headers FROM ksk_got) d) AS sent_not_read,
       (SELECT count(*) FROM ksk_got g WHERE NOT EXISTS (
            SELECT 1 FROM ksk_sent s WHERE s.stream = g.stream AND s.batch_id = g.batch_id AND s.seq = g.seq)) AS read_later_batches,
       (SELECT count(*) FROM (SELECT stream, batch_id, seq FROM ksk_got GROUP BY 1, 2, 3 HAVING count(*) > 1) d) AS repeats;
-- in each partition, a stream's messages are in outbox order; a key is in one partition
SELECT count(*) AS out_of_order FROM (
    SELECT batch_id, seq, lag(batch_id) OVER w AS pb, lag(seq) OVER w AS ps
    FROM ksk_got WINDOW w AS (PARTITION BY stream, part ORDER BY off)) x
WHERE (batch_id, seq) < (pb, ps);
SELECT count(*) AS keys_in_two_partitions FROM (
    SELECT stream, key FROM ksk_got WHERE key IS NOT NULL GROUP BY 1, 2 HAVING count(DISTINCT part) > 1) x;
-- progress counts the delivered rows of each batch (tombstones included)
SELECT stream, sum(num_output_rows) AS output_rows, sum(num_delivered_rows) AS delivered_rows
FROM streaming.progress WHERE stream LIKE 'ksk\_%' GROUP BY stream ORDER BY stream;
SELECT count(*) AS messages FROM ksk_got;

--
-- a message larger than the producer may send (message.max.bytes) goes to
-- dead_letters with its outbox position, counted in progress; the others are
-- delivered
--
\set VERBOSITY terse
SELECT streaming.create_kafka_sink('ksk_small', :'bs', 'ksk_small' || :'run', format => 'text',
    kafka_options => '{"message.max.bytes": 1000}');
\set VERBOSITY default
SELECT streaming.create_stream('ksk_small_st', $$SELECT CASE WHEN id = 2 THEN repeat('x', 5000) ELSE name END AS v
    FROM ksk_src WHERE id <= 4$$, sink => 'ksk_small');
SELECT streaming.process_available('ksk_small_st', '60s');
SELECT last_batch_id, outbox_rows FROM streaming.streams WHERE name = 'ksk_small_st';
SELECT streaming.stop('ksk_small_st');
SELECT stream, stm_strip(position::text) AS position, length(raw) AS raw_bytes, stm_strip(error) AS error, sqlstate
FROM streaming.dead_letters WHERE stream = 'ksk_small_st';
-- with the whole message's length and SHA-256
SELECT raw_length, raw_sha256 = sha256(raw) AS sha256_of_message
FROM streaming.dead_letters WHERE stream = 'ksk_small_st';
SELECT batch_id, num_output_rows, num_delivered_rows, num_rejected_rows FROM streaming.progress WHERE stream = 'ksk_small_st';
SELECT seq, value FROM ksk_read('ksk_small' || :'run') ORDER BY seq;

--
-- drop: a Kafka sink is refused while streams write to it; drop_stream is
-- refused while rows wait for delivery, unless force => true
--
SELECT stm_error($$SELECT streaming.drop_kafka_sink('ksk_agg')$$);
SELECT stm_error($$SELECT streaming.drop_kafka_sink('no_such')$$);
\! printf '%s\n' '{"id": 10, "name": "ten"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ksk_in$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ksk_json_st');
SELECT stm_error($$SELECT streaming.drop_stream('ksk_json_st')$$);
-- reset forgets positions, but a stream with a Kafka sink keeps numbering its batches
SELECT streaming.reset('ksk_json_st');
SELECT streaming.run_batch('ksk_json_st');
SELECT batch_id, count(*) FROM ksk_outbox WHERE stream = 'ksk_json_st' GROUP BY batch_id ORDER BY batch_id;
SELECT id AS json_id FROM streaming.stream_defs WHERE name = 'ksk_json_st' \gset
SELECT streaming.drop_stream('ksk_json_st', force => true);
SELECT count(*) AS discarded_rows_left FROM streaming.outbox WHERE stream_id = :json_id;
-- drop_sink drops a Kafka sink with the last stream that writes to it
SELECT streaming.drop_stream('ksk_key1_st', drop_sink => true);
SELECT streaming.drop_stream('ksk_upd', drop_sink => true, force => true);
SELECT name FROM streaming.sinks ORDER BY name;
SELECT streaming.drop_stream(name, drop_sink => true, force => true) FROM streaming.streams
WHERE name LIKE 'ksk\_%' ORDER BY name;
SELECT streaming.drop_kafka_sink('ksk_json');
SELECT count(*) AS sinks_left FROM streaming.sinks;
SELECT count(*) AS outbox_left FROM streaming.outbox;
SELECT streaming.drop_source('ksk_src');
DROP TABLE ksk_labels;
DROP FUNCTION ksk_read(text);
DROP TABLE ksk_lines, ksk_csv_back, ksk_sent, ksk_got;
DROP VIEW ksk_outbox;
DROP FUNCTION stm_error(text), stm_strip(text);
DROP FUNCTION stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
