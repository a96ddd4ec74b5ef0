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
