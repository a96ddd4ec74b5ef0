--
-- init: CREATE EXTENSION streaming and what it creates (SPEC 1, 4).
--
-- pg_regress --load-extension=streaming has already created the extension:
-- drop it and create it again, so that this test sees a fresh install.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS streaming CASCADE;
RESET client_min_messages;
CREATE EXTENSION streaming;

-- the extension and its schema
SELECT extname, extversion, extnamespace::regnamespace AS schema, extrelocatable
FROM pg_extension WHERE extname = 'streaming';
SELECT nspname FROM pg_namespace WHERE nspname = 'streaming';
-- the tests need a UTF8 database (non-ASCII names, invalid UTF-8 records)
SELECT getdatabaseencoding();

-- every object of the extension, in a stable order
SELECT pg_describe_object(classid, objid, 0) AS object
FROM pg_depend
WHERE refclassid = 'pg_extension'::regclass
  AND refobjid = (SELECT oid FROM pg_extension WHERE extname = 'streaming')
  AND deptype = 'e'
ORDER BY 1;

-- catalog tables kept by pg_dump (pg_extension_config_dump)
SELECT unnest(extconfig)::regclass::text AS config_table
FROM pg_extension WHERE extname = 'streaming'
ORDER BY 1;

-- the SQL API: names, arguments and defaults (SPEC 2.1, 3, 4)
SELECT p.proname, a.n, a.argument
FROM pg_proc p,
     regexp_split_to_table(pg_get_function_arguments(p.oid), ', ') WITH ORDINALITY AS a(argument, n)
WHERE p.pronamespace = 'streaming'::regnamespace
ORDER BY p.proname, a.n;
SELECT p.proname, pg_get_function_result(p.oid) AS result
FROM pg_proc p
WHERE p.pronamespace = 'streaming'::regnamespace
ORDER BY p.proname;

-- the monitoring views and their columns (SPEC 4)
\d streaming.streams
\d streaming.progress
\d streaming.source_lag
\d streaming.processed_files
\d streaming.dead_letters

-- nothing defined yet
SELECT count(*) FROM streaming.sources;
SELECT count(*) FROM streaming.streams;
SELECT count(*) FROM streaming.progress;
SELECT count(*) FROM streaming.dead_letters;

-- settings and their defaults (SPEC 1: streaming.*); the tests' build also
-- has streaming.test_fault (src/fault.h), which a production build has not
SELECT name, boot_val, unit, context
FROM pg_settings
WHERE name LIKE 'streaming.%' AND name <> 'streaming.test_fault'
ORDER BY name;

-- with shared_preload_libraries, one launcher runs
SELECT backend_type, count(*)
FROM pg_stat_activity
WHERE backend_type = 'streaming launcher'
GROUP BY backend_type;
