/*
 * streaming--0.1.0--0.2.0.sql: ALTER EXTENSION streaming UPDATE from 0.1.0.
 *
 * Every catalog change since 0.1.0 goes here as well as into
 * streaming--0.2.0.sql, so that an upgraded catalog equals a fresh install
 * (test/t/008_upgrade.pl compares the two).  Running streams keep their
 * positions, state and history: tables are altered in place, never
 * recreated.  So a column that ALTER TABLE ... ADD COLUMN adds here goes at
 * the end of its CREATE TABLE in streaming--0.2.0.sql (the comparison
 * includes column order), and a change to what the library creates per
 * stream (state tables in schema streaming, sinks, source views) changes
 * the existing ones here too: the test also compares the tables that
 * streams made under 0.1.0 with those the same streams get under 0.2.0.
 */
\echo Use "ALTER EXTENSION streaming UPDATE" to load this file. \quit
