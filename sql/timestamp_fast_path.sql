--
-- timestamp_fast_path: timestamptz and timestamp columns take values in the
-- exact RFC 3339 form without PostgreSQL's date parser (src/rfc3339.c), and
-- give what timestamptz_in and timestamp_in give; every other text goes to
-- those input functions, with their values and errors.
--
-- test_timestamp_fast_path(n, seed, all_fractions) is in test builds only
-- (make FAULT_INJECTION=1): n generated strings (fractions of 0-9 digits,
-- offsets up to +-15:59 and beyond, leap days and Feb 29 of other years,
-- month ends, the ends of the form's range, 24:00:00, :60, malformed near
-- misses), and with all_fractions first every fraction of 1 to 6 digits,
-- through the fast paths and the input functions (typmods -1 and 0..6);
-- it returns the mismatches.  The full run, by hand (about a minute):
--     SELECT test_timestamp_fast_path(10000000, 1, true);
--
CREATE FUNCTION test_timestamp_fast_path(n bigint, seed bigint, all_fractions boolean)
RETURNS bigint AS '$libdir/streaming', 'streaming_test_timestamp_fast_path' LANGUAGE C STRICT;
-- the session's TimeZone must not matter (values with an offset)
SET TimeZone = 'America/Sao_Paulo';
SELECT test_timestamp_fast_path(100000, 1, false);
SET TimeZone = 'Asia/Kathmandu';
SELECT test_timestamp_fast_path(100000, 2, true);
-- another abbreviation set (it has Z as well)
SET timezone_abbreviations = 'Australia';
SELECT test_timestamp_fast_path(50000, 3, false);
RESET timezone_abbreviations;
RESET TimeZone;
DROP FUNCTION test_timestamp_fast_path(bigint, bigint, boolean);

--
-- through a stream: JSON lines of a file source into timestamptz,
-- timestamptz(3) and timestamp columns; each row the same as the casts of
-- its text, bad ones dead letters with the input function's error
--
\set dir `mktemp -d`
\setenv FS_DIR :dir
SET streaming.file_settle_time = '30min';
SET TimeZone = 'Europe/Berlin';
-- the values, one per line as JSON; the file's records carry each in all
-- four columns (raw: the text)
\! printf '%s\n' '"2024-02-29T23:59:59.999999+01:00"' '"2023-03-26t02:30:00Z"' '"2024-03-31 02:30:00.5-15:59"' '"0001-01-01T00:00:00-15:59"' '"9999-12-31T23:59:59.999999+15:59"' '"2024-10-27T02:30:00"' '"2024-06-01T24:00:00Z"' '"2024-06-30T23:59:60Z"' '"2024-06-01T12:00:00.1234565Z"' '"2024-06-01T12:00:00.9999995Z"' '"  2024-06-01T12:00:00+05:45 "' '"20240601T120000Z"' '"2024-06-01T12:00:00.0005+0530"' 'null' '"2024-06-01T12:00:00.999999-00:00"' '"2023-02-29T00:00:00Z"' '"2024-06-01T12:00:00+16:00"' '"12024-06-01T12:00:00Z"' '"0000-06-01T12:00:00Z"' '"2024-04-31T12:00:00Z"' '"2024-06-01T12:00:00.Z"' | awk '{ printf "{\"id\":%d,\"t\":%s,\"t3\":%s,\"tn\":%s,\"raw\":%s}\n", NR, $0, $0, $0, $0 }' | test/put_file.sh t.json
SELECT streaming.create_file_source('tfp_src', :'dir', format => 'json', pattern => '*.json',
    columns => 'id int, t timestamptz, t3 timestamptz(3), tn timestamp, raw text');
SELECT streaming.create_stream('tfp', $$SELECT id, t, t3, tn, raw FROM tfp_src$$, start => false);
SELECT streaming.run_batch('tfp');
-- the rows, and whether each is what the casts of its text give
SELECT id, t, t3, tn, t IS NOT DISTINCT FROM raw::timestamptz AND t3 IS NOT DISTINCT FROM raw::timestamptz(3)
       AND tn IS NOT DISTINCT FROM raw::timestamp AS same_as_casts
FROM tfp ORDER BY id;
SELECT position, error, sqlstate FROM streaming.dead_letters WHERE stream = 'tfp' ORDER BY position;
SELECT streaming.drop_stream('tfp', drop_sink => true);
SELECT streaming.drop_source('tfp_src');
DELETE FROM streaming.dead_letters;
RESET TimeZone;
\! rm -r "$FS_DIR"
