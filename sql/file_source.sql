--
-- file_source: streaming.create_file_source (SPEC 2.2): its arguments and
-- errors, the privileges of COPY FROM a file, which files a batch takes and
-- when, how lines become rows, dead letters, processed_files, source_lag,
-- clean_source, reset; all with run_batch.  Streams of every shape over a
-- file source are in file_streams.
--
-- The files live in a fresh directory (mktemp -d, as the server's user:
-- pg_regress runs psql as that user); test/put_file.sh writes one,
-- settled (mtime an hour ago) unless told otherwise.  Paths in messages are
-- shown as $DIR.
--
\set dir `mktemp -d`
\setenv FS_DIR :dir
SET fs.dir = :'dir';
-- run SQL, and show its error with the directory as $DIR
CREATE FUNCTION fs_try(sql text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
    RETURN replace(SQLERRM, current_setting('fs.dir'), '$DIR') || ' (' || SQLSTATE || ')';
END $$;
-- the stream's files, as processed_files shows them
CREATE VIEW fs_files AS
SELECT stream, file_name, size, batch_id FROM streaming.processed_files;
CREATE VIEW fs_lag AS
SELECT stream, topic, partition, committed_offset, high_watermark, lag FROM streaming.source_lag;
CREATE VIEW fs_dead AS
SELECT stream, source, position, convert_from(raw, 'UTF8') AS raw, error, sqlstate
FROM streaming.dead_letters;
-- settled means an hour old here, not settled ten minutes old
SET streaming.file_settle_time = '30min';

--
-- arguments: each is checked, and a bad one leaves nothing behind
--
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L)', 'fs_bad', 'relative/dir', 'a int'));
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L)', 'fs_bad', :'dir' || '/nowhere', 'a int'));
\! echo x | test/put_file.sh plain.txt
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L)', 'fs_bad', :'dir' || '/plain.txt', 'a int'));
\! rm "$FS_DIR/plain.txt"
SELECT streaming.create_file_source('fs_bad', NULL, columns => 'a int');
SELECT streaming.create_file_source('fs_bad', :'dir');
SELECT streaming.create_file_source('fs_bad', :'dir', format => 'xml');
SELECT streaming.create_file_source('fs_bad', :'dir', format => NULL, columns => 'a int');
SELECT streaming.create_file_source('fs_bad', :'dir', format => 'text', columns => 'a int');
SELECT streaming.create_file_source('fs_bad', :'dir', format => 'json', csv_header => true);
SELECT streaming.create_file_source('fs_bad', :'dir', format => 'text', csv_delimiter => ';');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', csv_delimiter => ';;');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', csv_delimiter => '"');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', csv_delimiter => E'\n');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', pattern => '');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', pattern => 'sub/*.csv');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', pattern => NULL);
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', max_files_per_trigger => 0);
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', max_file_age => '0');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', max_file_age => '-1 day');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', latest_first => NULL);
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', clean_source => 'move');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', clean_source => 'archive');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', archive_directory => '/tmp');
\! mkdir "$FS_DIR/archive" "$FS_DIR/data"
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L, clean_source => %L, archive_directory => %L)',
    'fs_bad', :'dir', 'a int', 'archive', :'dir' || '/archive'));
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L, clean_source => %L, archive_directory => %L)',
    'fs_bad', :'dir' || '/data', 'a int', 'archive', :'dir' || '/data'));
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L, clean_source => %L, archive_directory => %L)',
    'fs_bad', :'dir' || '/data', 'a int', 'archive', :'dir' || '/nowhere'));
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L, clean_source => %L, archive_directory => %L)',
    'fs_bad', :'dir' || '/data', 'a int', 'archive', 'archive'));
\! chmod a-w "$FS_DIR/archive"
SELECT fs_try(format('SELECT streaming.create_file_source(%L, %L, columns => %L, clean_source => %L, archive_directory => %L)',
    'fs_bad', :'dir' || '/data', 'a int', 'archive', :'dir' || '/archive'));
\! chmod u+w "$FS_DIR/archive"
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int', on_bad_record => 'retry');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'file_line int');
SELECT streaming.create_file_source('fs_bad', :'dir', columns => 'a int, a text');
SELECT streaming.create_file_source('', :'dir', columns => 'a int');
-- nothing was created
SELECT count(*) FROM streaming.sources;
SELECT count(*) FROM pg_class WHERE relname = 'fs_bad';

--
-- privileges: those of COPY FROM a file (SQLSTATE 42501 otherwise, and
-- nothing created), and of COPY TO a file for clean_source; checked again
-- whenever a batch opens the source, for its owner and the stream's
--
CREATE ROLE regress_fs_reader IN ROLE pg_read_server_files;
CREATE ROLE regress_fs_nobody;
GRANT CREATE ON SCHEMA public TO regress_fs_reader, regress_fs_nobody;
SET ROLE regress_fs_nobody;
SELECT streaming.create_file_source('fs_priv', :'dir' || '/data', columns => 'a int');
SET ROLE regress_fs_reader;
SELECT streaming.create_file_source('fs_priv', :'dir' || '/data', columns => 'a int', clean_source => 'delete');
RESET ROLE;
SELECT count(*) FROM streaming.sources;
SET ROLE regress_fs_reader;
SELECT streaming.create_file_source('fs_priv', :'dir' || '/data', columns => 'a int');
SELECT streaming.create_stream('fs_priv_s', 'SELECT a FROM fs_priv', start => false);
RESET ROLE;
\! printf '1\n2\n' | test/put_file.sh data/p1.csv
-- the batch runs as the stream's owner, who may read files
SELECT streaming.run_batch('fs_priv_s');
SELECT * FROM fs_priv_s;
-- a stream of a role that may not read files, over a source that may
GRANT SELECT ON fs_priv TO regress_fs_nobody;
SET ROLE regress_fs_nobody;
SELECT streaming.create_stream('fs_priv_n', 'SELECT a FROM fs_priv', start => false);
RESET ROLE;
SELECT streaming.run_batch('fs_priv_n');
-- the source's owner loses the privilege: its stream reads no file either
REVOKE pg_read_server_files FROM regress_fs_reader;
\! printf '3\n' | test/put_file.sh data/p2.csv
SELECT streaming.run_batch('fs_priv_s');
SELECT * FROM fs_priv_s;
SELECT streaming.drop_stream('fs_priv_n', drop_sink => true);
SELECT streaming.drop_stream('fs_priv_s', drop_sink => true);
SELECT streaming.drop_source('fs_priv');

--
-- which files, and when (csv with a header)
--
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_orders', :'dir' || '/data', csv_header => true,
    columns => 'id int, customer text, amount numeric(10,2)', pattern => '*.csv');
\d fs_orders
SELECT * FROM fs_orders;
SELECT name, kind, options - 'directory' AS options FROM streaming.sources WHERE name = 'fs_orders';
SELECT streaming.create_stream('fs_all', 'SELECT * FROM fs_orders', start => false);
-- nothing yet
SELECT streaming.run_batch('fs_all');
-- the oldest file first; names that start with . or _, other names,
-- subdirectories and files not settled yet are not read
\! printf 'id,customer,amount\n1,alice,10\n2,bob,20\n' | test/put_file.sh data/b.csv '3 hours ago'
\! printf 'id,customer,amount\n3,carol,30\n' | test/put_file.sh data/a.csv '2 hours ago'
\! printf 'id,customer,amount\n99,hidden,0\n' | test/put_file.sh data/_tmp.csv '3 hours ago'
\! printf 'id,customer,amount\n99,hidden,0\n' | test/put_file.sh data/.tmp.csv '3 hours ago'
\! printf 'id,customer,amount\n99,other,0\n' | test/put_file.sh data/notes.txt '3 hours ago'
\! printf 'id,customer,amount\n99,sub,0\n' | test/put_file.sh data/sub/c.csv '3 hours ago'
\! printf 'id,customer,amount\n4,dave,40\n' | test/put_file.sh data/new.csv '10 minutes ago'
SELECT streaming.run_batch('fs_all');
SELECT * FROM fs_all ORDER BY id;
SELECT batch_id, num_input_rows, start_positions, end_positions FROM streaming.progress WHERE stream = 'fs_all';
SELECT * FROM fs_files ORDER BY file_name;
-- the pending file is in source_lag, one row with its size as lag
SELECT * FROM fs_lag;
SELECT name, last_batch_id, lag FROM streaming.streams WHERE name = 'fs_all';
-- settled after streaming.file_settle_time
SET streaming.file_settle_time = '5min';
SELECT streaming.run_batch('fs_all');
SELECT id, file_name, file_line FROM fs_all ORDER BY id;
SELECT * FROM fs_lag;
SET streaming.file_settle_time = '30min';
-- a file of a name the stream has read is never read again, whatever it holds
\! printf 'id,customer,amount\n5,again,50\n' | test/put_file.sh data/a.csv
SELECT streaming.run_batch('fs_all');
SELECT count(*) FROM fs_all;
SELECT * FROM fs_lag;

-- latest_first and max_files_per_trigger: newest first, two per batch
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_newest', :'dir' || '/data', columns => 'id int',
    latest_first => true, max_files_per_trigger => 2);
SELECT streaming.create_stream('fs_newest_s', 'SELECT id, file_name FROM fs_newest', start => false);
\! printf '1\n' | test/put_file.sh data/f1 '5 hours ago'
\! printf '2\n' | test/put_file.sh data/f2 '4 hours ago'
\! printf '3\n' | test/put_file.sh data/f3 '3 hours ago'
\! printf '4\n' | test/put_file.sh data/f4 '3 hours ago'
\! printf '5\n' | test/put_file.sh data/f5 '2 hours ago'
SELECT streaming.run_batch('fs_newest_s');
SELECT * FROM fs_lag ORDER BY topic;
SELECT streaming.run_batch('fs_newest_s');
SELECT streaming.run_batch('fs_newest_s');
SELECT streaming.run_batch('fs_newest_s');
SELECT batch_id, end_positions FROM streaming.progress WHERE stream = 'fs_newest_s' ORDER BY batch_id;
SELECT stream, file_name, batch_id FROM fs_files WHERE stream = 'fs_newest_s' ORDER BY batch_id, file_name;

-- max_file_age: a file older than that when the stream first sees it is
-- never read; one seen in time is read even when it is older by then
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_age', :'dir' || '/data', columns => 'id int',
    max_file_age => '1 day', max_files_per_trigger => 1);
SELECT streaming.create_stream('fs_age_s', 'SELECT id, file_name FROM fs_age', start => false);
\! printf '1\n' | test/put_file.sh data/old '2 days ago'
\! printf '2\n' | test/put_file.sh data/young1 '3 hours ago'
\! printf '3\n' | test/put_file.sh data/young2 '2 hours ago'
SELECT streaming.run_batch('fs_age_s');
SELECT * FROM fs_lag ORDER BY topic;
\! touch -d '3 days ago' "$FS_DIR/data/young2"
SELECT streaming.run_batch('fs_age_s');
SELECT streaming.run_batch('fs_age_s');
SELECT * FROM fs_age_s ORDER BY id;
SELECT file_name, batch_id FROM streaming.files f JOIN streaming.stream_defs d ON d.id = f.stream_id
WHERE d.name = 'fs_age_s' ORDER BY file_name;
SELECT file_name FROM fs_files WHERE stream = 'fs_age_s' ORDER BY file_name;

--
-- csv: COPY's rules (quotes, escapes, line breaks in quotes, an empty
-- unquoted field is NULL, a quoted one ''), csv_delimiter; lines that hold
-- nothing are skipped but counted; file_line is the record's first line
-- (the header is line 1); a last line without a line break counts
--
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_csv', :'dir' || '/data', csv_header => true, csv_delimiter => ';',
    columns => 'id int, name text, note text');
SELECT streaming.create_stream('fs_csv_s', 'SELECT * FROM fs_csv', start => false);
\! printf 'id;name;note\n1;plain;x\n\n2;"semi;colon";"say ""hi"""\n3;"two\nlines";\n4;;""\n\n5;last;no newline' | test/put_file.sh data/a.csv
-- CRLF line breaks, and a line "\." (the end of COPY's data), which is a
-- record of one field here
\! printf 'id;name;note\r\n6;crlf;"in\r\nquotes"\r\n\\.\r\n7;after;marker\r\n' | test/put_file.sh data/b.csv
SELECT streaming.run_batch('fs_csv_s');
SELECT id, name, note, note IS NULL AS note_null, file_name, file_line FROM fs_csv_s ORDER BY id;
SELECT * FROM fs_dead ORDER BY position->>'file', (position->>'line')::int;
DELETE FROM streaming.dead_letters;

-- bad records: a bad value, a wrong field count, invalid UTF-8 (one record
-- each), and then what COPY cannot read past (line breaks that change
-- within the file): the rest of that file is one bad record
\! printf 'id;name;note\n1;ok;\nx;bad int;\n2;too;many;fields\n3;bad \377 utf8;\n4;ok;\n5;cr\rin the middle\n6;lost;\n' | test/put_file.sh data/c.csv
-- a zero byte stops COPY too
\! printf 'id;name;note\n7;ok;\n8;zero \000 byte;\n9;lost;\n' | test/put_file.sh data/d.csv
SELECT streaming.run_batch('fs_csv_s');
SELECT id, name, file_name, file_line FROM fs_csv_s WHERE file_name IN ('c.csv', 'd.csv') ORDER BY id;
SELECT position, encode(raw, 'escape') AS raw, error, sqlstate FROM streaming.dead_letters
ORDER BY position->>'file', (position->>'line')::int;
SELECT num_input_rows, num_output_rows, num_bad_rows FROM streaming.progress
WHERE stream = 'fs_csv_s' ORDER BY batch_id DESC LIMIT 1;
DELETE FROM streaming.dead_letters;

-- a record larger than streaming.max_record_size: COPY would keep it
-- whole, so it ends its file (as a bad record)
SET streaming.max_record_size = '100kB';
\! (printf 'id;name;note\n1;small;\n2;'; head -c 300000 /dev/zero | tr '\0' x; printf ';\n3;lost;\n') | test/put_file.sh data/e.csv
SELECT streaming.run_batch('fs_csv_s');
SELECT id, file_line FROM fs_csv_s WHERE file_name = 'e.csv';
-- raw keeps 64 kB; raw_length and raw_sha256 are of the whole rest of the file
SELECT position, length(raw), raw_length,
       raw_sha256 = sha256(convert_to('2;' || repeat('x', 300000) || E';\n3;lost;\n', 'UTF8')) AS sha256_of_all,
       error
FROM streaming.dead_letters;
DELETE FROM streaming.dead_letters;
RESET streaming.max_record_size;
-- on_bad_record => 'fail' names the file and line
SELECT streaming.create_file_source('fs_fail', :'dir' || '/data', columns => 'id int',
    pattern => 'f.csv', on_bad_record => 'fail');
SELECT streaming.create_stream('fs_fail_s', 'SELECT id FROM fs_fail', start => false);
\! printf '1\n2\nthree\n' | test/put_file.sh data/f.csv
SELECT streaming.run_batch('fs_fail_s');
SELECT count(*) FROM fs_fail_s;
SELECT streaming.drop_stream('fs_fail_s', drop_sink => true);
SELECT streaming.drop_source('fs_fail');

--
-- json: one object per line (blank lines skipped), by key name; without
-- columns, one jsonb value; a line larger than max_record_size is a bad
-- record (one longer than the read buffer is not kept whole) and reading
-- goes on
--
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_json', :'dir' || '/data', format => 'json',
    columns => 'id int, tags jsonb, ts timestamptz');
SELECT streaming.create_file_source('fs_jsonb', :'dir' || '/data', format => 'json');
\d fs_jsonb
SELECT streaming.create_stream('fs_json_s', 'SELECT * FROM fs_json', start => false);
SELECT streaming.create_stream('fs_jsonb_s', 'SELECT * FROM fs_jsonb', start => false);
SET streaming.max_record_size = '100kB';
\! (printf '{"id": 1, "tags": ["a"], "ts": "2024-01-01 10:00:00+00"}\n   \n{"id": 2, "extra": true}\r\nnot json\n{"id": "x"}\n{"id": 3, "big": "'; head -c 1500000 /dev/zero | tr '\0' y; printf '"}\n{"id": 4}') | test/put_file.sh data/a.json
-- such a line last, without a line break, is a bad record too
\! (printf '{"id": 5}\n{"id": 6, "big": "'; head -c 1500000 /dev/zero | tr '\0' y) | test/put_file.sh data/b.json '50 minutes ago'
SELECT streaming.run_batch('fs_json_s');
SELECT streaming.run_batch('fs_jsonb_s');
SELECT * FROM fs_json_s ORDER BY file_name, file_line;
SELECT value->'id' AS id, file_name, file_line FROM fs_jsonb_s ORDER BY file_name, file_line;
-- the long lines: raw keeps 64 kB, raw_length and raw_sha256 describe the line
SELECT stream, position, length(raw), raw_length,
       raw_sha256 = CASE WHEN raw_length < 65536 THEN sha256(raw)
                         WHEN position->>'file' = 'a.json'
                         THEN sha256(convert_to('{"id": 3, "big": "' || repeat('y', 1500000) || '"}', 'UTF8'))
                         ELSE sha256(convert_to('{"id": 6, "big": "' || repeat('y', 1500000), 'UTF8')) END
           AS sha256_of_all,
       error
FROM streaming.dead_letters
ORDER BY stream, position->>'file', (position->>'line')::int;
DELETE FROM streaming.dead_letters;
RESET streaming.max_record_size;

--
-- text: one value per line, '' for an empty line
--
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_text', :'dir' || '/data', format => 'text');
SELECT streaming.create_stream('fs_text_s', 'SELECT value, length(value) AS len, file_line FROM fs_text', start => false);
\! printf 'first\n\n  spaced  \r\nlast' | test/put_file.sh data/a.txt
\! printf '' | test/put_file.sh data/empty.txt
SELECT streaming.run_batch('fs_text_s');
SELECT * FROM fs_text_s ORDER BY file_line;
-- an empty file is read (and listed) too
SELECT file_name, size FROM fs_files WHERE stream = 'fs_text_s' ORDER BY file_name;

--
-- clean_source: after the commit (run_batch never gets there: the next
-- batch cleans before it plans); a rolled-back batch leaves its files where
-- they are, to be read again
--
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
SELECT streaming.create_file_source('fs_del', :'dir' || '/data', columns => 'id int', clean_source => 'delete');
SELECT streaming.create_stream('fs_del_s', 'SELECT id, file_name FROM fs_del', start => false);
\! printf '1\n' | test/put_file.sh data/d1
BEGIN;
SELECT streaming.run_batch('fs_del_s');
SELECT count(*) FROM fs_del_s;
-- the next batch of the same transaction does not clean what it read
SELECT streaming.run_batch('fs_del_s');
ROLLBACK;
\! ls "$FS_DIR/data"
SELECT streaming.run_batch('fs_del_s');
SELECT * FROM fs_del_s;
\! ls "$FS_DIR/data"
\! printf '2\n' | test/put_file.sh data/d2
SELECT streaming.run_batch('fs_del_s');
\! ls "$FS_DIR/data"
SELECT file_name, batch_id, cleaned_at IS NOT NULL AS cleaned FROM streaming.files f
JOIN streaming.stream_defs d ON d.id = f.stream_id WHERE d.name = 'fs_del_s' ORDER BY file_name;
-- archive: under the file's own name, then name.1, name.2: nothing is overwritten
\! rm -rf "$FS_DIR/data" "$FS_DIR/archive"; mkdir "$FS_DIR/data" "$FS_DIR/archive"
SELECT streaming.create_file_source('fs_arch', :'dir' || '/data', columns => 'id int',
    clean_source => 'archive', archive_directory => :'dir' || '/archive');
SELECT streaming.create_stream('fs_arch_s', 'SELECT id, file_name FROM fs_arch', start => false);
\! printf 'old\n' > "$FS_DIR/archive/x.csv"
\! printf '1\n' | test/put_file.sh data/x.csv
\! printf '2\n' | test/put_file.sh data/y.csv
SELECT streaming.run_batch('fs_arch_s');
SELECT streaming.run_batch('fs_arch_s');
\! cd "$FS_DIR" && ls data archive && cat archive/x.csv archive/x.csv.1
-- a file that appeared under a read file's name is left alone (and not read)
\! printf '1\n' | test/put_file.sh data/z.csv
SELECT streaming.run_batch('fs_arch_s');
\! printf '3\n' | test/put_file.sh data/z.csv '2 hours ago'
SELECT streaming.run_batch('fs_arch_s');
\! ls "$FS_DIR/data"
SELECT * FROM fs_arch_s ORDER BY id;

-- reset: the stream forgets which files it read, and reads them again
\! rm -rf "$FS_DIR/data"; mkdir "$FS_DIR/data"
\! printf '1\n2\n' | test/put_file.sh data/r1
SELECT streaming.create_file_source('fs_reset', :'dir' || '/data', columns => 'id int');
SELECT streaming.create_stream('fs_reset_s', 'SELECT id FROM fs_reset', start => false);
SELECT streaming.run_batch('fs_reset_s');
SELECT streaming.run_batch('fs_reset_s');
SELECT streaming.reset('fs_reset_s');
SELECT count(*) FROM fs_files WHERE stream = 'fs_reset_s';
SELECT streaming.run_batch('fs_reset_s');
SELECT id, count(*) FROM fs_reset_s GROUP BY id ORDER BY id;

-- a directory that cannot be read: the stream waits (class 08)
\! chmod a-rx "$FS_DIR/data"
SELECT fs_try($$SELECT streaming.run_batch('fs_reset_s')$$);
\! chmod u+rx "$FS_DIR/data"

-- dropping the streams takes their files' rows with them
SELECT streaming.drop_stream(name, drop_sink => true) FROM streaming.stream_defs ORDER BY name;
SELECT count(*) FROM streaming.files;
SELECT count(*) FROM streaming.positions;
SELECT streaming.drop_source(name) FROM streaming.sources ORDER BY name;
DROP VIEW fs_files, fs_lag, fs_dead;
DROP FUNCTION fs_try(text);
REVOKE CREATE ON SCHEMA public FROM regress_fs_reader, regress_fs_nobody;
DROP ROLE regress_fs_reader, regress_fs_nobody;
RESET streaming.file_settle_time;
\! rm -rf "$FS_DIR"
