/*
 * sql.c: the extension's own SQL statements with named parameters (sql.h),
 * and who runs them: as the extension's owner for its catalog
 * (stm_catalog_begin), or as the current user, always with search_path
 * pinned.
 *
 * A query (SELECT, INSERT, UPDATE, DELETE, WITH) is parsed and planned
 * once per process: its plan is kept (SPI_keepplan) by its text and
 * parameter types, and PostgreSQL's plan cache re-plans it when what it
 * reads changes (an upgrade, a dropped table).  A worker runs the same few
 * catalog statements in every batch; parsing and planning them each time
 * was most of a small batch's cost.  At most MAX_KEPT_PLANS are kept
 * (texts that embed names differ per stream); later ones run unkept.
 * Utility statements are never kept, nor statements that read named
 * tuplestores, whose plans depend on how many rows those hold, except
 * through stm_spi_execute_reading (an INSERT of every row of one, whose
 * plan does not): kept by their text and the tuplestore's row type.
 *
 * Every statement runs in an SPI connection of its own, never kept open
 * (a caller may be inside another SPI call), and is not read-only: under
 * READ COMMITTED each takes a fresh snapshot, so that a batch that waited
 * for another one sees its commit.  search_path is pinned to pg_catalog
 * for the statement, so that no user object can capture the names it uses.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/indexing.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "common/hashfn.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/queryenvironment.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "sql.h"

/* ---- who runs the extension's SQL --------------------------------------- */

int
stm_catalog_pin_search_path(void)
{
	int			nestlevel = NewGUCNestLevel();

	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	return nestlevel;
}

void
stm_catalog_unpin_search_path(int nestlevel)
{
	AtEOXact_GUC(true, nestlevel);
}

/*
 * The extension's row in pg_extension: its owner and its installed version
 * (NULL when it is not installed).  One index lookup, no SPI.
 */
bool
stm_extension_row(Oid *owner, char **version)
{
	Relation	rel;
	ScanKeyData key;
	SysScanDesc scan;
	HeapTuple	tup;
	bool		found;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_extname, BTEqualStrategyNumber,
				F_NAMEEQ, CStringGetDatum("streaming"));
	scan = systable_beginscan(rel, ExtensionNameIndexId, true, NULL, 1, &key);
	tup = systable_getnext(scan);
	found = HeapTupleIsValid(tup);
	if (found)
	{
		bool		isnull;
		Datum		d = heap_getattr(tup, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		*owner = ((Form_pg_extension) GETSTRUCT(tup))->extowner;
		*version = isnull ? NULL : TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return found;
}

/*
 * The role that owns the extension (pg_extension.extowner), looked up once
 * per transaction.
 */
Oid
stm_catalog_extension_owner(void)
{
	static LocalTransactionId cached_lxid = InvalidLocalTransactionId;
	static Oid	cached_owner = InvalidOid;
	char	   *version;

	if (cached_lxid == MyProc->lxid && OidIsValid(cached_owner))
		return cached_owner;
	if (!stm_extension_row(&cached_owner, &version))
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("extension \"streaming\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION streaming.")));
	cached_lxid = MyProc->lxid;
	return cached_owner;
}

/*
 * Start reading or writing the catalog: as the extension's owner, with
 * search_path pinned.  stm_catalog_end puts both back; an error in between
 * is cleaned up by the (sub)transaction's abort, which restores the user id
 * and the settings.  Keeps SECURITY_RESTRICTED_OPERATION when a batch runs
 * under it.
 */
StmCatalogScope
stm_catalog_begin(void)
{
	StmCatalogScope scope;

	GetUserIdAndSecContext(&scope.save_userid, &scope.save_sec_context);
	SetUserIdAndSecContext(stm_catalog_extension_owner(),
						   scope.save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	scope.nestlevel = stm_catalog_pin_search_path();
	return scope;
}

void
stm_catalog_end(StmCatalogScope scope)
{
	stm_catalog_unpin_search_path(scope.nestlevel);
	SetUserIdAndSecContext(scope.save_userid, scope.save_sec_context);
}

/* ---- statements with named parameters ------------------------------------ */

void
stm_sql_init(StmSql *q, const char *sql)
{
	q->sql = sql;
	q->nparams = 0;
	q->enrs = NIL;
}

/* A named tuplestore the statement reads by its name (as trigger transition tables are). */
void
stm_sql_relation(StmSql *q, EphemeralNamedRelation enr)
{
	q->enrs = lappend(q->enrs, enr);
}

/*
 * Bind a parameter of the statement by name: it becomes $n, n in binding
 * order.  A NULL name binds $n of a statement written with numbers.
 */
void
stm_sql_param(StmSql *q, const char *name, Oid type, Datum value, bool isnull)
{
	if (q->nparams >= STM_SQL_MAX_PARAMS)
		elog(ERROR, "too many parameters for a statement of the streaming extension");
	q->names[q->nparams] = name;
	q->types[q->nparams] = type;
	q->values[q->nparams] = isnull ? (Datum) 0 : value;
	q->nulls[q->nparams] = isnull ? 'n' : ' ';
	q->nparams++;
}

/* text, or NULL */
void
stm_sql_text(StmSql *q, const char *name, const char *value)
{
	stm_sql_param(q, name, TEXTOID, value ? CStringGetTextDatum(value) : (Datum) 0, value == NULL);
}

/* jsonb given as its text, or NULL */
void
stm_sql_jsonb(StmSql *q, const char *name, const char *json)
{
	stm_sql_param(q, name, JSONBOID,
				  json ? DirectFunctionCall1(jsonb_in, CStringGetDatum(json)) : (Datum) 0,
				  json == NULL);
}

void
stm_sql_int4(StmSql *q, const char *name, int32 value)
{
	stm_sql_param(q, name, INT4OID, Int32GetDatum(value), false);
}

void
stm_sql_int8(StmSql *q, const char *name, int64 value)
{
	stm_sql_param(q, name, INT8OID, Int64GetDatum(value), false);
}

void
stm_sql_bool(StmSql *q, const char *name, bool value)
{
	stm_sql_param(q, name, BOOLOID, BoolGetDatum(value), false);
}

/* an oid; InvalidOid is NULL */
void
stm_sql_oid(StmSql *q, const char *name, Oid value)
{
	stm_sql_param(q, name, OIDOID, ObjectIdGetDatum(value), !OidIsValid(value));
}

void
stm_sql_timestamptz(StmSql *q, const char *name, TimestampTz value, bool isnull)
{
	stm_sql_param(q, name, TIMESTAMPTZOID, TimestampTzGetDatum(value), isnull);
}

static bool
ident_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/*
 * The statement with its bound names replaced by $1, $2, ...: a ":name"
 * outside quotes, not part of a "::" cast.  Every bound name must occur.
 */
static char *
numbered_sql(const StmSql *q)
{
	StringInfoData buf;
	bool		used[STM_SQL_MAX_PARAMS] = {false};
	const char *p = q->sql;
	char		quote = '\0';

	initStringInfo(&buf);
	while (*p)
	{
		if (quote)
		{
			if (*p == quote)
				quote = '\0';
			appendStringInfoChar(&buf, *p++);
			continue;
		}
		if (*p == '\'' || *p == '"')
		{
			quote = *p;
			appendStringInfoChar(&buf, *p++);
			continue;
		}
		if (p[0] == ':' && p[1] == ':')
		{
			appendStringInfoString(&buf, "::");
			p += 2;
			continue;
		}
		if (p[0] == ':' && ident_char(p[1]))
		{
			int			len = 1;
			int			found = -1;

			while (ident_char(p[len]))
				len++;
			for (int i = 0; i < q->nparams && found < 0; i++)
				if (q->names[i] && strlen(q->names[i]) == len - 1 &&
					strncmp(q->names[i], p + 1, len - 1) == 0)
					found = i;
			if (found >= 0)
			{
				appendStringInfo(&buf, "$%d", found + 1);
				used[found] = true;
				p += len;
				continue;
			}
		}
		appendStringInfoChar(&buf, *p++);
	}
	for (int i = 0; i < q->nparams; i++)
		if (!used[i] && q->names[i] != NULL)
			elog(ERROR, "parameter \"%s\" does not occur in: %s", q->names[i], q->sql);
	return buf.data;
}

/* ---- kept plans ----------------------------------------------------------- */

#define MAX_KEPT_PLANS 256

/* A kept plan: its statement's text and parameter types (in kept_cxt). */
typedef struct KeptPlan
{
	char	   *sql;
	int			nparams;
	Oid		   *types;
	char	   *reads;			/* the named tuplestore's row type, or NULL */
	SPIPlanPtr	plan;
} KeptPlan;

/* KeptPlans by the hash of their text and types (collisions share a list) */
typedef struct KeptPlanBucket
{
	uint32		hash;
	List	   *plans;
} KeptPlanBucket;

static HTAB *kept_plans = NULL;
static MemoryContext kept_cxt = NULL;
static int	nkept = 0;

/* A query worth keeping: not a utility statement (those run once). */
static bool
keepable(const char *sql)
{
	static const char *const kinds[] = {"select", "insert", "update", "delete", "with"};

	while (*sql == ' ' || *sql == '\n' || *sql == '\t' || *sql == '(')
		sql++;
	for (int i = 0; i < lengthof(kinds); i++)
		if (pg_strncasecmp(sql, kinds[i], strlen(kinds[i])) == 0 &&
			!ident_char(sql[strlen(kinds[i])]))
			return true;
	return false;
}

/*
 * The kept plan of this statement, prepared and kept now if it is not yet
 * and there is room; NULL when it is not to be kept.  In an SPI connection.
 * reads: NULL, or the row type of the named tuplestore it reads (then
 * registered in the connection), part of the key.
 */
static SPIPlanPtr
kept_plan(const char *sql, int nparams, Oid *types, const char *reads)
{
	uint32		hash;
	KeptPlanBucket *bucket;
	bool		found;
	ListCell   *lc;
	KeptPlan   *kp;
	SPIPlanPtr	plan;
	MemoryContext old;

	if (!keepable(sql))
		return NULL;
	if (kept_plans == NULL)
	{
		HASHCTL		ctl;

		kept_cxt = AllocSetContextCreate(TopMemoryContext, "streaming kept plans",
										 ALLOCSET_SMALL_SIZES);
		ctl.keysize = sizeof(uint32);
		ctl.entrysize = sizeof(KeptPlanBucket);
		ctl.hcxt = kept_cxt;
		kept_plans = hash_create("streaming kept plans", 64, &ctl,
								 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	hash = hash_bytes((const unsigned char *) sql, strlen(sql));
	if (nparams > 0)
		hash = hash_combine(hash, hash_bytes((const unsigned char *) types, sizeof(Oid) * nparams));
	if (reads)
		hash = hash_combine(hash, hash_bytes((const unsigned char *) reads, strlen(reads)));
	bucket = hash_search(kept_plans, &hash, HASH_FIND, NULL);
	if (bucket)
		foreach(lc, bucket->plans)
		{
			kp = lfirst(lc);
			if (kp->nparams == nparams && strcmp(kp->sql, sql) == 0 &&
				(nparams == 0 || memcmp(kp->types, types, sizeof(Oid) * nparams) == 0) &&
				(reads == NULL ? kp->reads == NULL : kp->reads != NULL && strcmp(kp->reads, reads) == 0))
				return kp->plan;
		}
	if (nkept >= MAX_KEPT_PLANS)
		return NULL;
	plan = SPI_prepare(sql, nparams, types);
	if (plan == NULL)
		elog(ERROR, "could not prepare %s: %s", sql, SPI_result_code_string(SPI_result));
	/* only once it is prepared: an error leaves nothing behind */
	if (SPI_keepplan(plan) != 0)
		elog(ERROR, "could not keep the plan of: %s", sql);
	old = MemoryContextSwitchTo(kept_cxt);
	kp = palloc(sizeof(KeptPlan));
	kp->sql = pstrdup(sql);
	kp->nparams = nparams;
	kp->types = palloc(sizeof(Oid) * Max(nparams, 1));
	if (nparams > 0)
		memcpy(kp->types, types, sizeof(Oid) * nparams);
	kp->reads = reads ? pstrdup(reads) : NULL;
	kp->plan = plan;
	bucket = hash_search(kept_plans, &hash, HASH_ENTER, &found);
	if (!found)
		bucket->plans = NIL;
	bucket->plans = lappend(bucket->plans, kp);
	MemoryContextSwitchTo(old);
	nkept++;
	return plan;
}

/* One statement in an SPI connection of its own; its rows to fn (NULL: none). */
static uint64
execute(const char *sql, int nparams, Oid *types, Datum *values, const char *nulls,
		int expect, StmSqlRowFn fn, void *arg, List *enrs)
{
	MemoryContext caller = CurrentMemoryContext;
	uint64		n;
	int			rc;
	ListCell   *lc;
	SPIPlanPtr	plan;

	SPI_connect();
	foreach(lc, enrs)
		if (SPI_register_relation(lfirst(lc)) != SPI_OK_REL_REGISTER)
			elog(ERROR, "could not register a named tuplestore for: %s", sql);
	plan = enrs == NIL ? kept_plan(sql, nparams, types, NULL) : NULL;
	if (plan)
		rc = SPI_execute_plan(plan, values, nulls, false, 0);
	else
		rc = SPI_execute_with_args(sql, nparams, types, values, nulls, false, 0);
	if (rc != expect)
		elog(ERROR, "unexpected result %s of: %s", SPI_result_code_string(rc), sql);
	n = SPI_processed;
	if (fn && SPI_tuptable)
	{
		MemoryContext spi = MemoryContextSwitchTo(caller);

		for (uint64 i = 0; i < SPI_processed; i++)
			fn(arg, SPI_tuptable->vals[i], SPI_tuptable->tupdesc);
		MemoryContextSwitchTo(spi);
	}
	SPI_finish();
	return n;
}

/*
 * Runs sql, a statement without named tuplestores, in the caller's SPI
 * connection (as execute() runs its own) with the given arguments, from
 * its kept plan, or unkept when there is no room; SPI's result code.  For
 * statements whose plan suits every value of their parameters: the plan
 * cache re-plans it only when its tables change.
 */
int
stm_spi_execute_kept(const char *sql, int nargs, Oid *types, Datum *values)
{
	SPIPlanPtr	plan = kept_plan(sql, nargs, types, NULL);

	return plan ? SPI_execute_plan(plan, values, NULL, false, 0) :
		SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);
}

/*
 * Runs sql, a statement without parameters that reads every row of one
 * named tuplestore whose rows are shaped as desc (an INSERT ... SELECT *
 * FROM it [ON CONFLICT ...]: its plan is the same whatever the tuplestore
 * holds), registered in the caller's SPI connection, from its kept plan
 * (unkept when there is no room); SPI's result code.  A continuous
 * stream's batch wrote its aggregate state and its sink's changes so,
 * parsing and planning both each time.  The key holds the row type, so
 * that a tuplestore of other columns under the same name is never read by
 * a plan made for these; PostgreSQL's plan cache re-plans it when its
 * table changes.
 */
int
stm_spi_execute_reading(const char *sql, TupleDesc desc)
{
	StringInfoData reads;
	SPIPlanPtr	plan;

	initStringInfo(&reads);
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		appendStringInfo(&reads, "%s%s %u %d %u", i ? ", " : "", NameStr(att->attname),
						 att->atttypid, att->atttypmod, att->attcollation);
	}
	plan = kept_plan(sql, 0, NULL, reads.data);
	pfree(reads.data);
	return plan ? SPI_execute_plan(plan, NULL, NULL, false, 0) : SPI_execute(sql, false, 0);
}

static uint64
run(StmSql *q, int expect, StmSqlRowFn fn, void *arg)
{
	char	   *sql = numbered_sql(q);
	uint64		n = execute(sql, q->nparams, q->types, q->values, q->nulls, expect, fn, arg, q->enrs);

	pfree(sql);
	return n;
}

/* As the current user (user objects: sink tables, views), search_path pinned. */
uint64
stm_sql_run(StmSql *q, int expect, StmSqlRowFn fn, void *arg)
{
	int			nest = stm_catalog_pin_search_path();
	uint64		n = run(q, expect, fn, arg);

	stm_catalog_unpin_search_path(nest);
	return n;
}

/*
 * As the extension's owner, search_path pinned: the catalog (catalog.c).
 * The caller has checked what the current user may do.
 */
uint64
stm_catalog_run(StmSql *q, int expect, StmSqlRowFn fn, void *arg)
{
	StmCatalogScope scope = stm_catalog_begin();
	uint64		n = run(q, expect, fn, arg);

	stm_catalog_end(scope);
	return n;
}

static int
column_number(TupleDesc desc, const char *column)
{
	int			col = SPI_fnumber(desc, column);

	if (col <= 0)
		elog(ERROR, "the statement's result has no column \"%s\"", column);
	return col;
}

/* A column's value as text (in the current memory context), or NULL. */
char *
stm_sql_get_text(HeapTuple tuple, TupleDesc desc, const char *column)
{
	return SPI_getvalue(tuple, desc, column_number(desc, column));
}

/* A column's value; one passed by reference points into the row (copy it). */
Datum
stm_sql_get_datum(HeapTuple tuple, TupleDesc desc, const char *column, bool *isnull)
{
	return SPI_getbinval(tuple, desc, column_number(desc, column), isnull);
}

/* ---- statements with a few numbered parameters ($1, $2) ----------------- */

/* One statement, which must return expect, as the current user (search_path as it is). */
void
stm_spi_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	(void) execute(sql, nargs, types, values, nulls, expect, NULL, NULL, NIL);
}

/* Change the catalog: as the extension's owner, after the caller was checked. */
void
stm_catalog_exec(const char *sql, int nargs, Oid *types, Datum *values, const char *nulls, int expect)
{
	StmCatalogScope scope = stm_catalog_begin();

	(void) execute(sql, nargs, types, values, nulls, expect, NULL, NULL, NIL);
	stm_catalog_end(scope);
}

typedef struct FirstValue
{
	bool		found;
	Datum		value;
	bool		isnull;
	bool		as_text;
	char	   *text;
} FirstValue;

static void
first_value(void *arg, HeapTuple tuple, TupleDesc desc)
{
	FirstValue *v = arg;

	if (v->found)
		return;
	v->found = true;
	if (v->as_text)
		v->text = SPI_getvalue(tuple, desc, 1);
	else
		v->value = SPI_getbinval(tuple, desc, 1, &v->isnull);
}

/*
 * The first column of the first row of a query over the catalog, of a type
 * passed by value (bool, integers), read as the extension's owner; *isnull
 * when there is no row or the value is NULL.
 */
Datum
stm_catalog_value(const char *sql, int nargs, Oid *types, Datum *values, bool *isnull)
{
	FirstValue	v = {false, (Datum) 0, true, false, NULL};
	StmCatalogScope scope = stm_catalog_begin();

	(void) execute(sql, nargs, types, values, NULL, SPI_OK_SELECT, first_value, &v, NIL);
	stm_catalog_end(scope);
	*isnull = !v.found || v.isnull;
	return *isnull ? (Datum) 0 : v.value;
}

/*
 * The first column of the first row of a query of the catalog with one
 * argument, as text in the caller's memory context; NULL when there is no
 * row or it is NULL.
 */
char *
stm_catalog_text(const char *sql, Oid argtype, Datum arg)
{
	FirstValue	v = {false, (Datum) 0, true, true, NULL};
	StmCatalogScope scope = stm_catalog_begin();

	(void) execute(sql, 1, &argtype, &arg, NULL, SPI_OK_SELECT, first_value, &v, NIL);
	stm_catalog_end(scope);
	return v.text;
}

static void
append_first_text(void *arg, HeapTuple tuple, TupleDesc desc)
{
	List	  **list = arg;

	*list = lappend(*list, SPI_getvalue(tuple, desc, 1));
}

/*
 * The first column of every row of a query over the catalog, as a List of
 * C strings (in the caller's memory context), read as the extension's owner.
 */
List *
stm_catalog_strings(const char *sql, int nargs, Oid *types, Datum *values)
{
	List	   *result = NIL;
	StmCatalogScope scope = stm_catalog_begin();

	(void) execute(sql, nargs, types, values, NULL, SPI_OK_SELECT, append_first_text, &result, NIL);
	stm_catalog_end(scope);
	return result;
}
