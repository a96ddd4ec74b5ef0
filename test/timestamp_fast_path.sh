#!/usr/bin/env bash
# test/timestamp_fast_path.sh [N]: the full differential test of the RFC 3339
# timestamp fast path (src/rfc3339.c), by hand; make test runs a smaller
# sample (sql/timestamp_fast_path.sql).
#
# Builds a private installation with FAULT_INJECTION=1 (test/pg_env.sh),
# adds four time zone abbreviation sets to it (T as an abbreviation; Z of
# offset 7200; Z of offset 0 as a daylight-saving zone; Z as a dynamic
# zone), starts a server and runs test_timestamp_fast_path: 1,000,000
# values under each of those sets, then every fraction of 1 to 6 digits
# and N generated values (default 25,000,000: more than 10 million of them
# are taken by the timestamptz fast path) in the Default set.  Each value
# is compared with timestamptz_in and timestamp_in; prints the counts and
# exits non-zero when any differed.  About three minutes on 2 cores.
set -u
N=${1:-25000000}
case $N in ''|*[!0-9]*) echo "test/timestamp_fast_path.sh: N wants a number" >&2; exit 2 ;; esac
. "$(dirname "${BASH_SOURCE[0]}")/pg_env.sh"
export STM_BUILD_ARGS=FAULT_INJECTION=1
stm_setup || exit 1
sets=$STM_INST$("$PG_CONFIG" --sharedir)/timezonesets
echo 'T 3600' >"$sets/StmT"
echo 'Z 7200' >"$sets/StmZ"
echo 'Z 0 D' >"$sets/StmZD"
echo 'Z Europe/Berlin' >"$sets/StmZdyn"
stm_cluster_start "$STM_TMP/data" "$STM_TMP/sock" || exit 1
cat >"$STM_TMP/full.sql" <<SQL
\set ON_ERROR_STOP on
CREATE FUNCTION test_timestamp_fast_path(n bigint, seed bigint, all_fractions boolean)
RETURNS bigint AS '\$libdir/streaming', 'streaming_test_timestamp_fast_path' LANGUAGE C STRICT;
CREATE TEMP TABLE mismatches (run text, n bigint);
SET TimeZone = 'Europe/Berlin';
SET timezone_abbreviations = 'StmT';
INSERT INTO mismatches SELECT 'StmT', test_timestamp_fast_path(1000000, 11, false);
SET timezone_abbreviations = 'StmZ';
INSERT INTO mismatches SELECT 'StmZ', test_timestamp_fast_path(1000000, 12, false);
SET timezone_abbreviations = 'StmZD';
INSERT INTO mismatches SELECT 'StmZD', test_timestamp_fast_path(1000000, 13, false);
SET timezone_abbreviations = 'StmZdyn';
INSERT INTO mismatches SELECT 'StmZdyn', test_timestamp_fast_path(1000000, 14, false);
RESET timezone_abbreviations;
SET TimeZone = 'America/New_York';
\timing on
INSERT INTO mismatches SELECT 'Default', test_timestamp_fast_path($N, 1, true);
\timing off
SELECT * FROM mismatches;
SELECT sum(n) AS mismatches FROM mismatches \gset
\if :mismatches
\echo FAILED: :mismatches mismatches
\quit 3
\endif
\echo ok: no mismatches
SQL
chmod 644 "$STM_TMP/full.sql"
stm_run "$STM_BINDIR/psql" -X -h "$STM_TMP/sock" -p 5432 -U "$STM_USER" -d postgres \
	-f "$STM_TMP/full.sql"
rc=$?
stm_run "$STM_BINDIR/pg_ctl" -D "$STM_TMP/data" stop -m fast >/dev/null
exit $rc
