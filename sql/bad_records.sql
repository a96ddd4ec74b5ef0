--
-- bad_records: records that cannot be parsed or converted (SPEC 5) go to
-- streaming.dead_letters in the batch's transaction ('dead_letter'), are
-- only counted ('skip'), or stop the batch naming their position ('fail');
-- good records of the same batch reach the sink.
--
-- Environment: KAFKA_BOOTSTRAP, KAFKA_RUN_ID (optional topic suffix, taken
-- out of the output); topics get 4 partitions when first produced to.
-- The database encoding must be UTF8 (invalid UTF-8 is a bad record).
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
SET br.run = :'run';
CREATE OR REPLACE FUNCTION br_strip(t text) RETURNS text
    LANGUAGE sql STABLE RETURN replace(t, current_setting('br.run'), '');
CREATE OR REPLACE FUNCTION br_error(sql text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    d text;
    h text;
BEGIN
    EXECUTE sql;
    RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS d = PG_EXCEPTION_DETAIL, h = PG_EXCEPTION_HINT;
    RETURN SQLSTATE || ': ' || br_strip(SQLERRM)
        || CASE WHEN d <> '' THEN E'\nDETAIL: ' || br_strip(d) ELSE '' END
        || CASE WHEN h <> '' THEN E'\nHINT: ' || h ELSE '' END;
END $$;
CREATE VIEW br_dead AS
SELECT stream, source, br_strip(position->>'topic') AS topic,
       (position->>'partition')::int AS part, (position->>'offset')::bigint AS off,
       CASE WHEN raw IS NULL THEN '(null)' WHEN length(raw) > 60 THEN length(raw) || ' bytes'
            ELSE encode(raw, 'escape') END AS raw,
       sqlstate, error,
       (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(position) k) AS position_keys
FROM streaming.dead_letters;
SELECT getdatabaseencoding();

--
-- json with declared columns
--
\set t br_json:run
\! printf '%s\n' '{"id": 1, "amount": 1.5, "ts": "2024-01-01 00:00:00+00", "tag": "ok"}' '{"id": 2, "amount": 2' '{"id": "two", "ts": "2024-01-01 00:00:02+00"}' '{"id": 3000000000, "ts": "2024-01-01 00:00:03+00"}' '{"id": 4, "amount": 12345.678, "ts": "2024-01-01 00:00:04+00"}' '{"id": 5, "ts": "not a time"}' '{"id": 6, "amount": 6}' '{"id": 7, "ts": null}' '{"id": 8, "ts": "2024-01-01 00:00:08+00", "tag": "toolong"}' '[1, 2]' '"just a string"' '{"id": 11, "amount": 11, "ts": "2024-01-01 00:00:11+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0
-- offset 12: an empty value, 13: a null value (tombstone)
\! printf 'k12:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0 -K:
\! printf 'k13:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0 -K: -Z
-- offset 14: invalid UTF-8, 15: a zero byte
\! printf '{"id": 14, "ts": "2024-01-01 00:00:14+00", "tag": "\377\376"}\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0
\! printf '{"id": 15, "ts": "2024-01-01 00:00:15+00"}\000\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0
-- offset 16: larger than streaming.max_record_size (set to 200 bytes below)
\! printf '{"id": 16, "ts": "2024-01-01 00:00:16+00", "pad": "%0200d"}\n' 0 | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0
-- offset 17: good again; partition 1: one good, one bad
\! printf '%s\n' '{"id": 17, "ts": "2024-01-01 00:00:17+00"}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 0
\! printf '%s\n' '{"id": 100, "ts": "2024-01-01 00:01:40+00"}' '{"id": 101,}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_json$KAFKA_RUN_ID" -p 1

SET streaming.max_record_size = 200;

-- on_bad_record => 'dead_letter' (the default)
SELECT streaming.create_kafka_source('br_dl_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest',
    columns => 'id int, amount numeric(6,2), ts timestamptz, tag varchar(3)');
SELECT streaming.create_stream('br_dl', 'SELECT id, amount, ts, tag, kafka_offset AS off FROM br_dl_src',
    event_time => 'ts', start => false);
-- the dead letters are written in the batch's transaction
BEGIN;
SELECT streaming.run_batch('br_dl');
SELECT count(*) FROM streaming.dead_letters;
ROLLBACK;
SELECT count(*) FROM streaming.dead_letters;
SELECT streaming.run_batch('br_dl');
SELECT * FROM br_dl ORDER BY id;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_bad_rows, max_event_time
FROM streaming.progress WHERE stream = 'br_dl' ORDER BY batch_id;
SELECT * FROM br_dead WHERE stream = 'br_dl' ORDER BY part, off;
-- nothing new: no batch, no more dead letters
SELECT streaming.run_batch('br_dl');
SELECT count(*) FROM streaming.dead_letters;

-- on_bad_record => 'skip': counted in progress only
SELECT streaming.create_kafka_source('br_skip_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', on_bad_record => 'skip',
    columns => 'id int, amount numeric(6,2), ts timestamptz, tag varchar(3)');
SELECT streaming.create_stream('br_skip', 'SELECT id, kafka_offset AS off FROM br_skip_src',
    event_time => 'ts', start => false);
SELECT streaming.run_batch('br_skip');
SELECT * FROM br_skip ORDER BY id;
SELECT stream, batch_id, num_input_rows, num_output_rows, num_bad_rows
FROM streaming.progress WHERE stream = 'br_skip' ORDER BY batch_id;
SELECT count(*) FROM streaming.dead_letters WHERE stream = 'br_skip';

-- on_bad_record => 'fail': the batch stops at the first bad record, naming
-- its position, and commits nothing
SELECT streaming.create_kafka_source('br_fail_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', on_bad_record => 'fail',
    columns => 'id int, amount numeric(6,2), ts timestamptz, tag varchar(3)');
SELECT streaming.create_stream('br_fail', 'SELECT id, kafka_offset AS off FROM br_fail_src',
    event_time => 'ts', start => false);
SELECT br_error($$SELECT streaming.run_batch('br_fail')$$);
SELECT count(*) FROM br_fail;
SELECT count(*) FROM streaming.progress WHERE stream = 'br_fail';
SELECT count(*) FROM streaming.source_lag WHERE stream = 'br_fail';
SELECT name, last_batch_id FROM streaming.streams WHERE name = 'br_fail';
SELECT count(*) FROM streaming.dead_letters WHERE stream = 'br_fail';
-- a record that is only bad for this stream (NULL event time) fails too
\set t br_fail2:run
\! printf '%s\n' '{"id": 1, "ts": "2024-01-01 00:00:00+00"}' '{"id": 2}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_fail2$KAFKA_RUN_ID" -p 2
SELECT streaming.create_kafka_source('br_fail2_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', on_bad_record => 'fail', columns => 'id int, ts timestamptz');
SELECT streaming.create_stream('br_fail2', 'SELECT id FROM br_fail2_src',
    event_time => 'ts', start => false);
SELECT br_error($$SELECT streaming.run_batch('br_fail2')$$);
SELECT count(*) FROM br_fail2;
-- without event_time the same record is good
SELECT streaming.create_stream('br_fail2b', 'SELECT id, ts FROM br_fail2_src', start => false);
SELECT streaming.run_batch('br_fail2b');
SELECT * FROM br_fail2b ORDER BY id;

--
-- csv
--
\set t br_csv:run
\! printf '%s\n' '1,one' '2' '3,three,extra' '"4,four' '5,fi"ve' 'six,6' '7,"seven"' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_csv$KAFKA_RUN_ID" -p 3
\! printf 'k7:\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_csv$KAFKA_RUN_ID" -p 3 -K:
\! printf '8,eight\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_csv$KAFKA_RUN_ID" -p 3
SELECT streaming.create_kafka_source('br_csv_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'csv', columns => 'a int, b text');
SELECT streaming.create_stream('br_csv', 'SELECT a, b FROM br_csv_src', start => false);
SELECT streaming.run_batch('br_csv');
SELECT * FROM br_csv ORDER BY a;
SELECT * FROM br_dead WHERE stream = 'br_csv' ORDER BY part, off;

--
-- json without columns (value jsonb) and text: only what cannot be a
-- value of that type is bad
--
\set t br_raw:run
\! printf '%s\n' '{"a": 1}' '{"a": ' '[1, 2]' 'plain' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_raw$KAFKA_RUN_ID" -p 0
\! printf 'bad \377 utf8\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_raw$KAFKA_RUN_ID" -p 0
\! printf '%s\n' '42' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_raw$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('br_jsonv_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest');
SELECT streaming.create_kafka_source('br_text_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'text');
SELECT streaming.create_stream('br_jsonv', 'SELECT kafka_offset AS off, value FROM br_jsonv_src', start => false);
SELECT streaming.create_stream('br_text', 'SELECT kafka_offset AS off, value FROM br_text_src', start => false);
SELECT streaming.run_batch('br_jsonv');
SELECT streaming.run_batch('br_text');
SELECT * FROM br_jsonv ORDER BY off;
SELECT * FROM br_text ORDER BY off;
SELECT * FROM br_dead WHERE stream IN ('br_jsonv', 'br_text') ORDER BY stream, part, off;

-- bad records larger than 64 kB: raw keeps their first 64 kB, raw_length
-- and raw_sha256 describe all of each (offset 0: malformed JSON of 100 kB;
-- 1: 150 kB, over streaming.max_record_size)
\set t br_big:run
\! (printf '{"id": 1, "pad": "'; head -c 100000 /dev/zero | tr '\000' 'a'; printf '\n') | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_big$KAFKA_RUN_ID" -p 0
\! (printf '{"id": 2, "pad": "'; head -c 150000 /dev/zero | tr '\000' 'b'; printf '"}\n') | kcat -P -b "$KAFKA_BOOTSTRAP" -t "br_big$KAFKA_RUN_ID" -p 0
SET streaming.max_record_size = 120000;
SELECT streaming.create_kafka_source('br_big_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'id int, pad text');
SELECT streaming.create_stream('br_big', 'SELECT id FROM br_big_src', start => false);
SELECT streaming.run_batch('br_big');
SELECT (position->>'offset')::int AS off, length(raw) AS raw_kept, raw_length,
       raw = substring(convert_to(CASE WHEN position->>'offset' = '0'
                                       THEN '{"id": 1, "pad": "' || repeat('a', 100000)
                                       ELSE '{"id": 2, "pad": "' || repeat('b', 150000) || '"}' END, 'UTF8')
                       FROM 1 FOR 65536) AS raw_is_the_start,
       raw_sha256 = sha256(convert_to(CASE WHEN position->>'offset' = '0'
                                           THEN '{"id": 1, "pad": "' || repeat('a', 100000)
                                           ELSE '{"id": 2, "pad": "' || repeat('b', 150000) || '"}' END, 'UTF8'))
           AS sha256_of_all,
       sqlstate
FROM streaming.dead_letters WHERE stream = 'br_big' ORDER BY 1;
SET streaming.max_record_size = 200;

-- dropping a stream drops its dead letters
SELECT stream, count(*) FROM streaming.dead_letters GROUP BY stream ORDER BY stream;
SELECT streaming.drop_stream('br_dl', drop_sink => true);
SELECT stream, count(*) FROM streaming.dead_letters GROUP BY stream ORDER BY stream;

-- clean up
RESET streaming.max_record_size;
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN SELECT name FROM streaming.streams LOOP
        PERFORM streaming.drop_stream(r.name, drop_sink => true);
    END LOOP;
    FOR r IN SELECT name FROM streaming.sources LOOP
        PERFORM streaming.drop_source(r.name);
    END LOOP;
END $$;
DROP VIEW br_dead;
SELECT count(*) FROM streaming.sources;
SELECT count(*) FROM streaming.dead_letters;
