/*
 * sql.h: the extension's own SQL statements, with named parameters.
 *
 * A statement names its parameters (":stream_id"), the caller binds them
 * by name and type, and one call connects to SPI, executes, checks the
 * result, hands each row to a callback and disconnects:
 *
 *     StmSql      q;
 *
 *     stm_sql_init(&q, "UPDATE streaming.stream_defs SET status = :status WHERE id = :id");
 *     stm_sql_int4(&q, "id", stream_id);
 *     stm_sql_text(&q, "status", "running");
 *     stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL);
 *
 * so that no caller numbers parameters or fills positional arrays.  The
 * names become $1, $2, ... in the order they were bound ("::" casts are
 * left alone); a name bound but missing from the statement is an error.
 * A statement written with $1, $2 binds its parameters with NULL names.
 */
#ifndef STM_SQL_H
#define STM_SQL_H

#include "access/htup.h"
#include "access/tupdesc.h"
#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

/* search_path pinned to pg_catalog, pg_temp (for SQL the extension generates) */
extern int	stm_catalog_pin_search_path(void);
extern void stm_catalog_unpin_search_path(int nestlevel);

/* catalog access: as the extension's owner, search_path pinned */
typedef struct StmCatalogScope
{
	int			nestlevel;
	Oid			save_userid;
	int			save_sec_context;
} StmCatalogScope;

extern bool stm_extension_row(Oid *owner, char **version);
extern Oid	stm_catalog_extension_owner(void);
extern StmCatalogScope stm_catalog_begin(void);
extern void stm_catalog_end(StmCatalogScope scope);

/* statements with a few numbered parameters ($1, $2, ...) */
extern void stm_spi_exec(const char *sql, int nargs, Oid *types, Datum *values,
						 const char *nulls, int expect);
extern void stm_catalog_exec(const char *sql, int nargs, Oid *types, Datum *values,
							 const char *nulls, int expect);
extern Datum stm_catalog_value(const char *sql, int nargs, Oid *types, Datum *values,
							   bool *isnull);
extern List *stm_catalog_strings(const char *sql, int nargs, Oid *types, Datum *values);
extern char *stm_catalog_text(const char *sql, Oid argtype, Datum arg);

/* statements run from kept plans in the caller's own SPI connection */
extern int	stm_spi_execute_kept(const char *sql, int nargs, Oid *types, Datum *values);
extern int	stm_spi_execute_reading(const char *sql, TupleDesc desc);

struct EphemeralNamedRelationData;

#define STM_SQL_MAX_PARAMS 32

typedef struct StmSql
{
	const char *sql;
	int			nparams;
	const char *names[STM_SQL_MAX_PARAMS];
	Oid			types[STM_SQL_MAX_PARAMS];
	Datum		values[STM_SQL_MAX_PARAMS];
	char		nulls[STM_SQL_MAX_PARAMS];
	List	   *enrs;			/* named tuplestores the statement reads */
} StmSql;

/*
 * A row of a statement's result, called while SPI is connected but in the
 * caller's memory context: what it allocates (stm_sql_get_text,
 * datumCopy) outlives the statement.
 */
typedef void (*StmSqlRowFn) (void *arg, HeapTuple tuple, TupleDesc desc);

extern void stm_sql_init(StmSql *q, const char *sql);
extern void stm_sql_param(StmSql *q, const char *name, Oid type, Datum value, bool isnull);
extern void stm_sql_text(StmSql *q, const char *name, const char *value);
extern void stm_sql_jsonb(StmSql *q, const char *name, const char *json);
extern void stm_sql_int4(StmSql *q, const char *name, int32 value);
extern void stm_sql_int8(StmSql *q, const char *name, int64 value);
extern void stm_sql_bool(StmSql *q, const char *name, bool value);
extern void stm_sql_oid(StmSql *q, const char *name, Oid value);
extern void stm_sql_timestamptz(StmSql *q, const char *name, TimestampTz value, bool isnull);
extern void stm_sql_relation(StmSql *q, struct EphemeralNamedRelationData *enr);

/* as the current user, search_path pinned (user objects: sinks, views) */
extern uint64 stm_sql_run(StmSql *q, int expect, StmSqlRowFn fn, void *arg);
/* as the extension's owner, search_path pinned (the catalog: catalog.c) */
extern uint64 stm_catalog_run(StmSql *q, int expect, StmSqlRowFn fn, void *arg);

/* reading a row in a StmSqlRowFn, by column name */
extern char *stm_sql_get_text(HeapTuple tuple, TupleDesc desc, const char *column);
extern Datum stm_sql_get_datum(HeapTuple tuple, TupleDesc desc, const char *column,
							   bool *isnull);

#endif
