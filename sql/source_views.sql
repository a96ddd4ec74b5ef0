--
-- source_views: a source's view belongs to its source (SPEC 1).  DROP VIEW,
-- ALTER VIEW (every form), ALTER TABLE and CREATE OR REPLACE VIEW of it
-- are refused with a hint naming streaming.drop_source, and so is a drop
-- that would take it by cascade; drop_source, DROP OWNED and DROP
-- EXTENSION ... CASCADE still drop it.  Other roles get PostgreSQL's own
-- errors.  Runs in a database of its own, so that DROP EXTENSION can be
-- tried.
--
\set regress_db :DBNAME
CREATE DATABASE regress_sv;
\c regress_sv
SET client_min_messages = notice;
CREATE EXTENSION streaming;
\set dir `mktemp -d`
SELECT streaming.create_rate_source('sv_ticks', 10);
CREATE VIEW sv_plain AS SELECT 1 AS x;

--
-- the owner (a superuser here): every form is refused, nothing changes
--
DROP VIEW sv_ticks;
DROP VIEW IF EXISTS sv_ticks;
-- a drop of several objects is refused as a whole
DROP VIEW sv_plain, sv_ticks;
SELECT to_regclass('sv_plain') IS NOT NULL AS plain_kept;
DROP VIEW sv_ticks CASCADE;
-- DROP TABLE and friends name the wrong kind: PostgreSQL refuses them
DROP TABLE sv_ticks;
ALTER VIEW sv_ticks RENAME TO sv_renamed;
ALTER TABLE sv_ticks RENAME TO sv_renamed;
ALTER VIEW sv_ticks RENAME COLUMN value TO v;
CREATE SCHEMA sv_elsewhere;
ALTER VIEW sv_ticks SET SCHEMA sv_elsewhere;
CREATE ROLE regress_sv_other;
ALTER VIEW sv_ticks OWNER TO regress_sv_other;
ALTER TABLE sv_ticks OWNER TO regress_sv_other;
ALTER VIEW sv_ticks ALTER COLUMN value SET DEFAULT 0;
ALTER VIEW sv_ticks ALTER COLUMN value DROP DEFAULT;
ALTER VIEW sv_ticks SET (security_barrier = true);
ALTER VIEW sv_ticks RESET (security_barrier);
CREATE OR REPLACE VIEW sv_ticks AS
    SELECT CAST(NULL AS timestamptz) AS timestamp, CAST(NULL AS bigint) AS value,
           CAST(NULL AS integer) AS partition, 1 AS extra;
-- CREATE VIEW of the name is PostgreSQL's own error
CREATE VIEW sv_ticks AS SELECT 1 AS x;
-- the view is as it was, and so is the source
\d sv_ticks
SELECT name, kind, view FROM streaming.sources;
-- harmless statements on it work: comments, grants
COMMENT ON VIEW sv_ticks IS 'ticks';
GRANT SELECT ON sv_ticks TO regress_sv_other;
-- and an ordinary view is not concerned
ALTER VIEW sv_plain RENAME TO sv_plain2;
DROP VIEW sv_plain2;

--
-- drops by cascade: the schema holding a source's view, a type of its columns
--
CREATE SCHEMA sv_schema;
CREATE DOMAIN sv_amount AS numeric(10, 2);
SET search_path = sv_schema, public;
SELECT streaming.create_file_source('sv_files', :'dir', columns => 'id int, amount sv_amount');
RESET search_path;
DROP SCHEMA sv_schema;
DROP SCHEMA sv_schema CASCADE;
DROP DOMAIN sv_amount CASCADE;
SELECT to_regclass('sv_schema.sv_files') IS NOT NULL AS files_view_kept;
-- drop_source drops the view; then the schema and the type go
SELECT streaming.drop_source('sv_files');
DROP SCHEMA sv_schema;
DROP DOMAIN sv_amount;

--
-- streams keep working: a stream reads the source, drop_source waits for it
--
SELECT streaming.create_stream('sv_st', 'SELECT value FROM sv_ticks', start => false);
DROP VIEW sv_ticks;
SELECT streaming.drop_source('sv_ticks');
SELECT streaming.drop_stream('sv_st', drop_sink => true);
SELECT streaming.drop_source('sv_ticks');
SELECT count(*) AS sources, to_regclass('sv_ticks') AS view FROM streaming.sources;

--
-- a hostile role that owns nothing here gets PostgreSQL's errors, which say
-- nothing of the source
--
SELECT streaming.create_rate_source('sv_ticks', 10);
CREATE ROLE regress_sv_hostile;
GRANT CREATE ON SCHEMA public TO regress_sv_hostile;
-- its own schema, with a type another role's source uses
CREATE SCHEMA sv_hostile_schema AUTHORIZATION regress_sv_hostile;
SET ROLE regress_sv_hostile;
CREATE DOMAIN sv_hostile_schema.sv_code AS text;
RESET ROLE;
SELECT streaming.create_file_source('sv_coded', :'dir', columns => 'code sv_hostile_schema.sv_code');
SET ROLE regress_sv_hostile;
DROP VIEW sv_ticks;
ALTER VIEW sv_ticks RENAME TO sv_mine;
ALTER VIEW sv_ticks OWNER TO regress_sv_hostile;
ALTER VIEW sv_ticks SET (security_barrier = true);
ALTER VIEW sv_ticks SET SCHEMA sv_elsewhere;
CREATE OR REPLACE VIEW sv_ticks AS SELECT 1 AS x;
DROP SCHEMA public CASCADE;
SELECT streaming.drop_source('sv_ticks');
-- a view of its own of another's source's name elsewhere is its own affair
CREATE VIEW sv_hostile_schema.sv_ticks AS SELECT 1 AS x;
DROP VIEW sv_hostile_schema.sv_ticks;
-- dropping its own type would cascade to another's source's view: refused
DROP DOMAIN sv_hostile_schema.sv_code CASCADE;
RESET ROLE;
SELECT name, to_regclass(view::text) IS NOT NULL AS view_kept FROM streaming.sources ORDER BY name;
SELECT streaming.drop_source('sv_coded');
DROP SCHEMA sv_hostile_schema CASCADE;

--
-- a non-superuser that owns a source: refused too; drop_source and DROP
-- OWNED BY drop it
--
CREATE ROLE regress_sv_owner;
GRANT CREATE ON SCHEMA public TO regress_sv_owner;
SET ROLE regress_sv_owner;
SELECT streaming.create_rate_source('sv_own', 5);
DROP VIEW sv_own;
ALTER VIEW sv_own RENAME TO sv_own2;
SELECT streaming.drop_source('sv_own');
SELECT streaming.create_rate_source('sv_own', 5);
SELECT streaming.create_stream('sv_own_st', 'SELECT value FROM sv_own', start => false);
RESET ROLE;
-- a member of the owning role is an owner too
GRANT regress_sv_owner TO regress_sv_hostile;
SET ROLE regress_sv_hostile;
DROP VIEW sv_own;
RESET ROLE;
REVOKE regress_sv_owner FROM regress_sv_hostile;
DROP OWNED BY regress_sv_owner;
SELECT name FROM streaming.sources ORDER BY name;
SELECT to_regclass('sv_own') AS own_view, to_regclass('sv_own_st') AS own_sink;

--
-- DROP EXTENSION ... CASCADE takes the sources' views with it
--
DROP EXTENSION streaming;
DROP EXTENSION streaming CASCADE;
SELECT to_regclass('sv_ticks') AS ticks_view;
-- without the extension, views of that name are ordinary ones
CREATE VIEW sv_ticks AS SELECT 1 AS x;
DROP VIEW sv_ticks;

\c :regress_db
DROP DATABASE regress_sv;
DROP ROLE regress_sv_other, regress_sv_hostile, regress_sv_owner;
