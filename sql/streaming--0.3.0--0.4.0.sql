/*
 * streaming 0.3.0 -> 0.4.0.  Each change below says what it is for; every
 * catalog change is made here and in streaming--0.4.0.sql alike
 * (test/t/008_upgrade.pl compares the upgraded catalog with a fresh
 * install).
 */
\echo Use "ALTER EXTENSION streaming UPDATE" to load this file. \quit
