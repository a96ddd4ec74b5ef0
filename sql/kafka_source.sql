--
-- kafka_source: the options of streaming.create_kafka_source (SPEC 2.1),
-- read with run_batch (streams created with start => false, no workers).
--
-- Environment: KAFKA_BOOTSTRAP (the broker), KAFKA_RUN_ID (optional suffix
-- of every topic name, so that a rerun against a real broker reads fresh
-- topics; it is taken out of everything this test prints).  Topics are
-- created by the first record produced to them and must get 4 partitions
-- (the mock broker's default; num.partitions=4 on a real broker).  Every
-- record goes to an explicit partition, so offsets are known.
--
\set run ''
\getenv run KAFKA_RUN_ID
\getenv bs KAFKA_BOOTSTRAP
\set VERBOSITY terse
SET stm.run = :'run';
\i test/regress_helpers.sql
CREATE OR REPLACE VIEW ks_progress AS
SELECT stream, batch_id, num_input_rows, num_output_rows, num_bad_rows,
       stm_strip(start_positions::text) AS start_positions,
       stm_strip(end_positions::text) AS end_positions
FROM streaming.progress;

--
-- format json with declared columns: matched by key; missing keys are NULL,
-- unknown keys ignored, nested values kept as JSON (jsonb or text column),
-- JSON strings converted by the column type's input function
--
\set t ks_json:run
\! printf '%s\n' '{"id": 1, "name": "one", "amount": 1.50, "ok": true, "attrs": {"x": 1, "y": [1, 2]}, "unknown": 42}' '{"id": 2, "name": null, "amount": -3, "attrs": [1, {"a": null}], "doc": {"k":"v", "l": [ 1,2 ]}}' '{"name": "no id", "amount": "12.5", "ok": "false", "attrs": "a string", "doc": "plain"}' '{"id": "4", "attrs": 7, "doc": 8, "name": "sp\"ecial \u00e9 \n", "nested": {"id": 99}}' '{}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_json$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ks_json_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest',
    columns => 'id bigint, name text, amount numeric(10,2), ok boolean, attrs jsonb, doc text');
\d ks_json_src
-- selecting from a source returns no rows
SELECT count(*) FROM ks_json_src;
SELECT streaming.create_stream('ks_json_st',
    'SELECT id, name, amount, ok, attrs, doc, kafka_topic, kafka_partition, kafka_offset,
            kafka_key, kafka_timestamp IS NOT NULL AS has_timestamp
     FROM ks_json_src', start => false);
SELECT streaming.run_batch('ks_json_st');
SELECT id, name, amount, ok, attrs, doc, stm_strip(kafka_topic) AS topic, kafka_partition,
       kafka_offset, kafka_key, has_timestamp
FROM ks_json_st ORDER BY kafka_partition, kafka_offset;
SELECT * FROM ks_progress WHERE stream = 'ks_json_st' ORDER BY batch_id;
-- selecting from the source did not move anything, and nothing is new
SELECT count(*) FROM ks_json_src;
SELECT streaming.run_batch('ks_json_st');

--
-- format json without columns: one column value jsonb
--
SELECT streaming.create_kafka_source('ks_jsonv_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest');
\d ks_jsonv_src
SELECT streaming.create_stream('ks_jsonv_st',
    'SELECT kafka_offset AS off, value, value->>''name'' AS name FROM ks_jsonv_src',
    start => false);
SELECT streaming.run_batch('ks_jsonv_st');
SELECT * FROM ks_jsonv_st ORDER BY off;

--
-- format csv: fields by position, RFC 4180 quotes; an unquoted empty field
-- is NULL, a quoted one an empty string
--
\set t ks_csv:run
\! printf '%s\n' '1,plain,hello,1.5' '2,"quoted, with comma","say ""hi""",2' '3,,"",' '4,"",,-0.25' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_csv$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ks_csv_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'csv',
    columns => 'id int, name text, note text, price numeric');
\d ks_csv_src
SELECT streaming.create_stream('ks_csv_st',
    'SELECT id, name, note, price, name IS NULL AS name_null, note IS NULL AS note_null
     FROM ks_csv_src', start => false);
SELECT streaming.run_batch('ks_csv_st');
SELECT * FROM ks_csv_st ORDER BY id;

--
-- formats text and bytes: one column value
--
\set t ks_text:run
\! printf 'hello world\n{"not": "parsed"}\n\303\274nic\303\266de\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_text$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ks_text_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'text');
SELECT streaming.create_kafka_source('ks_bytes_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'bytes');
\d ks_text_src
\d ks_bytes_src
SELECT streaming.create_stream('ks_text_st',
    'SELECT kafka_offset AS off, value, length(value) AS len FROM ks_text_src', start => false);
SELECT streaming.create_stream('ks_bytes_st',
    'SELECT kafka_offset AS off, value, length(value) AS len FROM ks_bytes_src', start => false);
SELECT streaming.run_batch('ks_text_st');
SELECT streaming.run_batch('ks_bytes_st');
SELECT * FROM ks_text_st ORDER BY off;
SELECT * FROM ks_bytes_st ORDER BY off;
-- bytes are not checked for encoding
\! printf '\377\376\000x\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_text$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ks_bytes_st');
SELECT * FROM ks_bytes_st WHERE off = 3;

--
-- metadata: kafka_key (bytea; NULL without a key), kafka_headers with
-- include_headers (NULL without headers)
--
\set t ks_meta:run
\! printf '%s\n' 'key1:{"v": 1}' 'k2:{"v": 2}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_meta$KAFKA_RUN_ID" -p 2 -K: -H h1=v1 -H h2=two -H h1=again
\! printf '%s\n' '{"v": 3}' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_meta$KAFKA_RUN_ID" -p 2
SELECT streaming.create_kafka_source('ks_meta_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', columns => 'v int', include_headers => true);
\d ks_meta_src
SELECT streaming.create_stream('ks_meta_st',
    'SELECT v, kafka_partition, kafka_offset, kafka_key, convert_from(kafka_key, ''UTF8'') AS key_text,
            kafka_headers
     FROM ks_meta_src', start => false);
SELECT streaming.run_batch('ks_meta_st');
SELECT * FROM ks_meta_st ORDER BY kafka_offset;

--
-- topics: several topics in one source
--
\set ta ks_multi_a:run
\set tb ks_multi_b:run
\! printf 'a0\na1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_multi_a$KAFKA_RUN_ID" -p 1
\! printf 'b0\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_multi_b$KAFKA_RUN_ID" -p 3
SELECT streaming.create_kafka_source('ks_multi_src', :'bs', topics => ARRAY[:'ta', :'tb'],
    starting_offsets => 'earliest', format => 'text');
SELECT streaming.create_stream('ks_multi_st',
    'SELECT kafka_topic AS topic, kafka_partition AS part, kafka_offset AS off, value FROM ks_multi_src',
    start => false);
SELECT streaming.run_batch('ks_multi_st');
SELECT stm_strip(topic) AS topic, part, off, value FROM ks_multi_st ORDER BY 1, 2, 3;
SELECT * FROM ks_progress WHERE stream = 'ks_multi_st' ORDER BY batch_id;

--
-- topic_pattern: a regular expression that must match the whole topic
-- name; a topic created later is picked up by the next batch, from its
-- earliest offset
--
\! printf 'a0\na1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_pat_a$KAFKA_RUN_ID" -p 0
\! printf 'no\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_pat_1$KAFKA_RUN_ID" -p 0
\! printf 'no\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "xks_pat_a$KAFKA_RUN_ID" -p 0
\! printf 'no\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_pat_a$KAFKA_RUN_ID.x" -p 0
SELECT streaming.create_kafka_source('ks_pat_src', :'bs',
    topic_pattern => 'ks_pat_[a-z]+' || :'run', starting_offsets => 'earliest', format => 'text');
SELECT streaming.create_stream('ks_pat_st',
    'SELECT kafka_topic AS topic, kafka_partition AS part, kafka_offset AS off, value FROM ks_pat_src',
    start => false);
SELECT streaming.run_batch('ks_pat_st');
SELECT stm_strip(topic) AS topic, part, off, value FROM ks_pat_st ORDER BY 1, 2, 3;
\! printf 'a2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_pat_a$KAFKA_RUN_ID" -p 0
\! printf 'b0\nb1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_pat_b$KAFKA_RUN_ID" -p 2
SELECT streaming.run_batch('ks_pat_st');
SELECT stm_strip(topic) AS topic, part, off, value FROM ks_pat_st ORDER BY 1, 2, 3;
SELECT * FROM ks_progress WHERE stream = 'ks_pat_st' ORDER BY batch_id;

-- a stream whose first batch found no matching topic says so in
-- source_error; its positions are fixed when the topic appears, with
-- starting_offsets ('latest': what was there is skipped, what comes after
-- is read)
SELECT streaming.create_kafka_source('ks_late_src', :'bs',
    topic_pattern => 'ks_late_[a-z]+' || :'run', format => 'text');
SELECT streaming.create_stream('ks_late_st', 'SELECT kafka_offset AS off, value FROM ks_late_src',
    start => false);
SELECT streaming.run_batch('ks_late_st');   -- no topic yet: nothing to do
SELECT stm_strip(source_error) AS source_error FROM streaming.streams WHERE name = 'ks_late_st';
\! printf 'l0\nl1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_late_a$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ks_late_st');   -- the topic appears: 'latest' is its end
SELECT stm_strip(source_error) AS source_error FROM streaming.streams WHERE name = 'ks_late_st';
\! printf 'l2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_late_a$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ks_late_st');
SELECT * FROM ks_late_st ORDER BY off;
-- a subscribed topic that does not exist: named in source_error
SELECT streaming.create_kafka_source('ks_missing_src', :'bs',
    topics => ARRAY[:'t', 'ks_missing' || :'run'], format => 'text');
SELECT streaming.create_stream('ks_missing_st', 'SELECT value FROM ks_missing_src', start => false);
SELECT streaming.run_batch('ks_missing_st') IS NOT NULL AS ran;
SELECT stm_strip(source_error) AS source_error FROM streaming.streams WHERE name = 'ks_missing_st';
SELECT streaming.drop_stream('ks_missing_st');
SELECT streaming.drop_source('ks_missing_src');

--
-- partitions: only the assigned partitions are read
--
\set t ks_assign:run
\! printf 'p0\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_assign$KAFKA_RUN_ID" -p 0
\! printf 'p1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_assign$KAFKA_RUN_ID" -p 1
\! printf 'p2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_assign$KAFKA_RUN_ID" -p 2
\! printf 'p3\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_assign$KAFKA_RUN_ID" -p 3
SELECT streaming.create_kafka_source('ks_assign_src', :'bs',
    partitions => jsonb_build_object(:'t', jsonb_build_array(3, 1)),
    starting_offsets => 'earliest', format => 'text');
SELECT streaming.create_stream('ks_assign_st',
    'SELECT kafka_partition AS part, kafka_offset AS off, value FROM ks_assign_src', start => false);
SELECT streaming.run_batch('ks_assign_st');
SELECT * FROM ks_assign_st ORDER BY part, off;
SELECT * FROM ks_progress WHERE stream = 'ks_assign_st' ORDER BY batch_id;
SELECT stream, stm_strip(topic) AS topic, partition, committed_offset, high_watermark, lag
FROM streaming.source_lag WHERE stream = 'ks_assign_st' ORDER BY 2, 3;

--
-- starting_offsets 'latest': records already there are skipped; the first
-- batch has nothing to do and pins the current ends
--
\set t ks_latest:run
\! printf 'old0\nold1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_latest$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ks_latest_src', :'bs', topics => ARRAY[:'t'],
    format => 'text');  -- starting_offsets defaults to latest
SELECT streaming.create_stream('ks_latest_st',
    'SELECT kafka_partition AS part, kafka_offset AS off, value FROM ks_latest_src', start => false);
SELECT streaming.run_batch('ks_latest_st');
SELECT stream, stm_strip(topic) AS topic, partition, committed_offset, high_watermark, lag
FROM streaming.source_lag WHERE stream = 'ks_latest_st' ORDER BY 2, 3;
\! printf 'new2\nnew3\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_latest$KAFKA_RUN_ID" -p 0
\! printf 'new0\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_latest$KAFKA_RUN_ID" -p 1
SELECT streaming.run_batch('ks_latest_st');
SELECT * FROM ks_latest_st ORDER BY part, off;
SELECT * FROM ks_progress WHERE stream = 'ks_latest_st' ORDER BY batch_id;

--
-- starting_offsets as JSON: an offset, -2 (earliest), -1 (latest)
--
\set t ks_offs:run
\! printf 'p0o0\np0o1\np0o2\np0o3\np0o4\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_offs$KAFKA_RUN_ID" -p 0
\! printf 'p1o0\np1o1\np1o2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_offs$KAFKA_RUN_ID" -p 1
\! printf 'p2o0\np2o1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_offs$KAFKA_RUN_ID" -p 2
SELECT streaming.create_kafka_source('ks_offs_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => format('{"%s": {"0": 3, "1": -2, "2": -1, "3": -1}}', :'t'),
    format => 'text');
SELECT streaming.create_stream('ks_offs_st',
    'SELECT kafka_partition AS part, kafka_offset AS off, value FROM ks_offs_src', start => false);
SELECT streaming.run_batch('ks_offs_st');
SELECT * FROM ks_offs_st ORDER BY part, off;
SELECT * FROM ks_progress WHERE stream = 'ks_offs_st' ORDER BY batch_id;
-- later records of a -1 partition are read
\! printf 'p2o2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_offs$KAFKA_RUN_ID" -p 2
SELECT streaming.run_batch('ks_offs_st');
SELECT * FROM ks_offs_st WHERE part = 2 ORDER BY part, off;
-- as in Spark, JSON starting offsets must name every partition
SELECT streaming.create_kafka_source('ks_offs2_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => format('{"%s": {"0": 1}}', :'t'), format => 'text');
SELECT streaming.create_stream('ks_offs2_st', 'SELECT value FROM ks_offs2_src', start => false);
SELECT stm_error($$SELECT streaming.run_batch('ks_offs2_st')$$);
SELECT count(*) FROM ks_offs2_st;
SELECT count(*) FROM streaming.source_lag WHERE stream = 'ks_offs2_st';

--
-- fail_on_data_loss: a stored (here: starting) offset that the partition
-- no longer holds stops the batch, or with false is recorded and skipped
--
SELECT streaming.create_kafka_source('ks_loss_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => format('{"%s": {"0": 10, "1": 0, "2": 0, "3": 0}}', :'t'),
    format => 'text');
SELECT streaming.create_stream('ks_loss_st',
    'SELECT kafka_partition AS part, kafka_offset AS off, value FROM ks_loss_src', start => false);
SELECT stm_error($$SELECT streaming.run_batch('ks_loss_st')$$);
SELECT count(*) FROM ks_loss_st;
SELECT streaming.create_kafka_source('ks_loss2_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => format('{"%s": {"0": 10, "1": 3, "2": 3, "3": 0}}', :'t'),
    format => 'text', fail_on_data_loss => false);
SELECT streaming.create_stream('ks_loss2_st',
    'SELECT kafka_partition AS part, kafka_offset AS off, value FROM ks_loss2_src', start => false);
SELECT streaming.run_batch('ks_loss2_st');
SELECT * FROM ks_loss2_st ORDER BY part, off;
SELECT stream, batch_id, num_input_rows, stm_strip(data_loss::text) AS data_loss
FROM streaming.progress WHERE stream = 'ks_loss2_st' ORDER BY batch_id;

--
-- kafka_options are passed to the client
--
SELECT streaming.create_kafka_source('ks_opts_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'text',
    kafka_options => '{"client.id": "regress", "fetch.wait.max.ms": 10, "check.crcs": true}');
SELECT streaming.create_stream('ks_opts_st', 'SELECT value FROM ks_opts_src', start => false);
SELECT streaming.run_batch('ks_opts_st');
SELECT count(*) FROM ks_opts_st;

--
-- max_offsets_per_trigger: batches are capped, and the cap is split over the
-- partitions by their lag (Spark's rateLimit: floor, but at least one
-- offset for a partition with lag)
--
\set t ks_max:run
\! printf '0\n1\n2\n3\n4\n5\n6\n7\n8\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_max$KAFKA_RUN_ID" -p 0
\! printf '0\n1\n2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_max$KAFKA_RUN_ID" -p 1
\! printf '0\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_max$KAFKA_RUN_ID" -p 2
SELECT streaming.create_kafka_source('ks_max_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'text', max_offsets_per_trigger => 5);
SELECT streaming.create_stream('ks_max_st',
    'SELECT kafka_partition AS part, kafka_offset AS off FROM ks_max_src', start => false);
-- 13 records: 3+1+1, then 3+1 of the remaining 6+2, then the last 3+1
SELECT streaming.run_batch('ks_max_st');
-- the lag is what the first batch left
SELECT stream, stm_strip(topic) AS topic, partition, committed_offset, high_watermark, lag
FROM streaming.source_lag WHERE stream = 'ks_max_st' ORDER BY 2, 3;
SELECT name, last_batch_id, lag FROM streaming.streams WHERE name = 'ks_max_st';
SELECT streaming.run_batch('ks_max_st');
SELECT streaming.run_batch('ks_max_st');
SELECT streaming.run_batch('ks_max_st');
SELECT * FROM ks_progress WHERE stream = 'ks_max_st' ORDER BY batch_id;
SELECT part, count(*), min(off), max(off) FROM ks_max_st GROUP BY part ORDER BY part;

--
-- min_offsets_per_trigger: a batch waits until that many records are
-- available (or until max_trigger_delay has passed since the last batch)
--
\set t ks_min:run
\! printf '0\n1\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_min$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ks_min_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'text', min_offsets_per_trigger => 3,
    max_trigger_delay => '1 hour');
SELECT streaming.create_stream('ks_min_st',
    'SELECT kafka_partition AS part, kafka_offset AS off FROM ks_min_src', start => false);
SELECT streaming.run_batch('ks_min_st');   -- 2 < 3: waits
\! printf '2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_min$KAFKA_RUN_ID" -p 1
SELECT streaming.run_batch('ks_min_st');   -- 3 records
\! printf '3\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_min$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ks_min_st');   -- 1 < 3: waits
\! printf '4\n5\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_min$KAFKA_RUN_ID" -p 3
SELECT streaming.run_batch('ks_min_st');   -- 3 records
SELECT * FROM ks_progress WHERE stream = 'ks_min_st' ORDER BY batch_id;
-- ... but not longer than max_trigger_delay after the last batch started
\set t ks_delay:run
\! printf '0\n1\n2\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_delay$KAFKA_RUN_ID" -p 0
SELECT streaming.create_kafka_source('ks_delay_src', :'bs', topics => ARRAY[:'t'],
    starting_offsets => 'earliest', format => 'text', min_offsets_per_trigger => 3,
    max_trigger_delay => '1 millisecond');
SELECT streaming.create_stream('ks_delay_st', 'SELECT kafka_offset AS off FROM ks_delay_src',
    start => false);
SELECT streaming.run_batch('ks_delay_st');   -- 3 records
\! printf '3\n' | kcat -P -b "$KAFKA_BOOTSTRAP" -t "ks_delay$KAFKA_RUN_ID" -p 0
SELECT streaming.run_batch('ks_delay_st');   -- 1 < 3, but the delay has passed
SELECT * FROM ks_delay_st ORDER BY off;

--
-- drop_source is refused while a stream reads the source
--
\set VERBOSITY default
SELECT streaming.drop_source('ks_json_src');
\set VERBOSITY terse
SELECT streaming.drop_stream('ks_json_st');
SELECT streaming.drop_source('ks_json_src');
SELECT to_regclass('ks_json_src') AS view;
SELECT count(*) FROM streaming.sources WHERE name = 'ks_json_src';
-- the stream's sink stays (drop_sink => false)
SELECT count(*) FROM ks_json_st;
SELECT streaming.drop_source('ks_json_src');

-- clean up
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
SELECT count(*) FROM streaming.sources;
DROP TABLE ks_json_st;
DROP VIEW ks_progress;
DROP FUNCTION stm_error(text), stm_strip(text);
DROP FUNCTION stm_produce(text, text), stm_check(text[]), stm_sessions(text, interval);
SELECT count(*) FROM streaming.positions;
SELECT count(*) FROM streaming.batches;
