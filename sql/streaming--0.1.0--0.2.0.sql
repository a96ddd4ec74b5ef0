/*
 * streaming--0.1.0--0.2.0.sql: ALTER EXTENSION streaming UPDATE from 0.1.0.
 *
 * Every catalog change since 0.1.0 goes here as well as into
 * streaming--0.2.0.sql, so that an upgraded catalog equals a fresh install
 * (test/t/008_upgrade.pl compares the two).  Running streams keep their
 * positions, state and history: tables are altered in place, never
 * recreated.
 */
\echo Use "ALTER EXTENSION streaming UPDATE" to load this file. \quit
