/*
 * sink_table.c: the table sink (SPEC 3.2).
 *
 * Output columns go to the table's columns of the same names, coerced to
 * the columns' types as INSERT would; columns the query does not give get
 * their defaults.  When the table is the outputs, in order and of the same
 * types (what create_stream makes), a row is copied as it is.
 *
 * Inserts, fast path (a plain heap table without row triggers, row-level
 * security or generated columns): rows are buffered and written with
 * table_multi_insert, then their index entries are made with
 * ExecInsertIndexTuples and constraints checked with ExecConstraints: the
 * same steps COPY FROM takes.  Anything else goes through a prepared INSERT
 * per row, so triggers, partition routing, RLS and foreign tables behave as
 * for any INSERT.  Upserts (INSERT ... ON CONFLICT on the key columns),
 * deletes and truncation are SQL statements, run with the sink's own
 * privileges checks.
 *
 * Update and upsert mode (SPEC 3.2): the batch keeps the last change of
 * each key in a hash table (keyed as the sink's unique key: NULLs equal),
 * so that the last change of a key in source order wins, and applies them
 * all at once at its end (or when they fill their share of
 * streaming.batch_memory):
 * one INSERT ... ON CONFLICT (key) DO UPDATE of the upserted rows and one
 * DELETE ... USING of the deleted keys, over the changes as ephemeral
 * named relations, so triggers, constraints and privileges apply as to any
 * such statement.  A key of a type without hashing, or a deleted key with
 * a NULL in it, takes a statement of its own; so does an update mode delete
 * (a session merged away), after the upserts kept before it.
 *
 * The INSERT privilege is checked when the batch opens the table
 * (ExecCheckRTPerms), as the executor would.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/relation.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/genam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_index.h"
#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "parser/parse_relation.h"
#include "parser/parse_coerce.h"
#include "rewrite/rewriteHandler.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/regproc.h"
#include "utils/rls.h"
#include "utils/tuplestore.h"
#include "utils/typcache.h"

#include "api.h"
#include "guc.h"
#include "sink_table.h"
#include "sql.h"

#define STM_SINK_BUFFER 1000

typedef struct TableSink
{
	StmSink		base;
	Oid			relid;
} TableSink;

typedef struct TableSinkBatch
{
	StmSinkBatch base;
	MemoryContext cxt;			/* the batch's: rows may come from shorter-lived contexts */
	Relation	rel;
	char	   *qualified_name;
	int			natts;

	/* output row -> table row */
	bool		identity;		/* the table's columns are the outputs */
	int		   *from_output;	/* per column: the output it copies, or -1 */
	ExprState **exprs;			/* per column: a coercion or the default, or NULL */
	TupleTableSlot *out_slot;	/* the output row, which exprs read */
	ExprContext *econtext;

	/* inserts */
	bool		fast;			/* heap multi-insert, else one INSERT per row */
	ResultRelInfo *rri;
	TupleTableSlot *slots[STM_SINK_BUFFER];
	int			nbuffered;
	struct BulkInsertStateData *bistate;
	MemoryContext flush_cxt;	/* what a flush allocates, reset after it */
	SPIPlanPtr	insert_plan;
	Datum	   *values;			/* slow path: a table row */
	bool	   *isnull;
	char	   *argnulls;

	/* update mode: statements with the outputs as parameters */
	Oid		   *out_types;
	char	   *out_nulls;
	SPIPlanPtr	upsert_plan;
	SPIPlanPtr	delete_plan;

	/* upsert mode: the last change of each key, applied at the batch's end */
	int			nwritten;		/* output columns the table gets (not the change column) */
	TupleHashTable changes;		/* NULL: a key without hashing, each change at once */
	MemoryContext changes_cxt;	/* the changes' rows */
	MemoryContext lookup_cxt;	/* a lookup's */
	TupleTableSlot *change_slot;	/* an output row */
	int64		nchanges;
} TableSinkBatch;

#define CHANGES_ENR_UPSERTS "streaming upserts"
#define CHANGES_ENR_DELETES "streaming deletes"

static void begin_changes(TableSinkBatch *tb);

static bool
can_use_fast_path(Relation rel)
{
	TupleDesc	desc = RelationGetDescr(rel);

	if (rel->rd_rel->relkind != RELKIND_RELATION)
		return false;
	if (rel->trigdesc != NULL)
		return false;
	if (desc->constr && desc->constr->has_generated_stored)
		return false;
	if (check_enable_rls(RelationGetRelid(rel), InvalidOid, true) == RLS_ENABLED)
		return false;
	return true;
}

static int
output_by_name(const StmSinkOutput *output, const char *name)
{
	for (int i = 0; i < stm_sink_output_columns(output); i++)
		if (strcmp(NameStr(TupleDescAttr(output->desc, i)->attname), name) == 0)
			return i;
	return -1;
}

/*
 * What fills each column: an output as it is, an output coerced to the
 * column's type (over out_slot), the column's default, or NULL.
 */
static void
map_columns(TableSinkBatch *tb)
{
	TupleDesc	desc = RelationGetDescr(tb->rel);
	TupleDesc	out = tb->base.output->desc;

	tb->natts = desc->natts;
	tb->from_output = palloc(sizeof(int) * Max(desc->natts, 1));
	tb->exprs = palloc0(sizeof(ExprState *) * Max(desc->natts, 1));
	tb->identity = desc->natts == stm_sink_output_columns(tb->base.output);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);
		int			i;
		Form_pg_attribute oatt;
		Node	   *expr;

		tb->from_output[a] = -1;
		if (att->attisdropped || att->attgenerated)
		{
			tb->identity = false;
			continue;
		}
		i = output_by_name(tb->base.output, NameStr(att->attname));
		if (i < 0)
		{
			tb->identity = false;
			expr = build_column_default(tb->rel, a + 1);
			if (expr)
				tb->exprs[a] = ExecInitExpr(expression_planner((Expr *) expr), NULL);
			continue;
		}
		oatt = TupleDescAttr(out, i);
		if (oatt->atttypid == att->atttypid &&
			(att->atttypmod < 0 || att->atttypmod == oatt->atttypmod))
		{
			tb->from_output[a] = i;
			tb->identity &= i == a;
			continue;
		}
		tb->identity = false;
		expr = coerce_to_target_type(NULL,
									 (Node *) makeVar(1, i + 1, oatt->atttypid, oatt->atttypmod,
													  oatt->attcollation, 0),
									 oatt->atttypid, att->atttypid, att->atttypmod,
									 COERCION_ASSIGNMENT, COERCE_IMPLICIT_CAST, -1);
		if (expr == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of sink table \"%s\" is of type %s, but the stream query gives %s",
							NameStr(att->attname), RelationGetRelationName(tb->rel),
							format_type_be(att->atttypid), format_type_be(oatt->atttypid))));
		tb->exprs[a] = ExecInitExpr(expression_planner((Expr *) expr), NULL);
	}
	if (!tb->identity)
	{
		tb->out_slot = MakeSingleTupleTableSlot(out, &TTSOpsVirtual);
		tb->econtext = CreateExprContext(tb->base.estate);
	}
}

/* The table row of an output row, in the econtext's memory until it is reset. */
static void
table_row(TableSinkBatch *tb, Datum *values, bool *nulls, Datum *dst, bool *dstnull)
{
	int			nout = stm_sink_output_columns(tb->base.output);

	if (tb->identity)
	{
		memcpy(dst, values, sizeof(Datum) * nout);
		memcpy(dstnull, nulls, sizeof(bool) * nout);
		return;
	}
	ExecClearTuple(tb->out_slot);
	memcpy(tb->out_slot->tts_values, values, sizeof(Datum) * nout);
	memcpy(tb->out_slot->tts_isnull, nulls, sizeof(bool) * nout);
	ExecStoreVirtualTuple(tb->out_slot);
	tb->econtext->ecxt_scantuple = tb->out_slot;
	for (int a = 0; a < tb->natts; a++)
	{
		if (tb->from_output[a] >= 0)
		{
			dst[a] = values[tb->from_output[a]];
			dstnull[a] = nulls[tb->from_output[a]];
		}
		else if (tb->exprs[a])
			dst[a] = ExecEvalExprSwitchContext(tb->exprs[a], tb->econtext, &dstnull[a]);
		else
		{
			dst[a] = (Datum) 0;
			dstnull[a] = true;
		}
	}
}

/* INSERT INTO sink (every column but dropped and generated ones), by attribute number */
static void
prepare_insert(TableSinkBatch *tb)
{
	TupleDesc	desc = RelationGetDescr(tb->rel);
	StringInfoData sql;
	StringInfoData vals;
	Oid		   *argtypes = palloc(sizeof(Oid) * Max(desc->natts, 1));
	int			n = 0;

	initStringInfo(&sql);
	initStringInfo(&vals);
	appendStringInfo(&sql, "INSERT INTO %s (", tb->qualified_name);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		/* parameters are numbered by attribute; dropped ones stay unused */
		argtypes[a] = att->attisdropped ? INT4OID : att->atttypid;
		if (att->attisdropped || att->attgenerated)
			continue;
		appendStringInfo(&sql, "%s%s", n > 0 ? ", " : "", quote_identifier(NameStr(att->attname)));
		appendStringInfo(&vals, "%s$%d", n > 0 ? ", " : "", a + 1);
		n++;
	}
	appendStringInfo(&sql, ") VALUES (%s)", vals.data);

	SPI_connect();
	tb->insert_plan = SPI_prepare(sql.data, desc->natts, argtypes);
	if (tb->insert_plan == NULL)
		elog(ERROR, "could not prepare INSERT into sink: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(tb->insert_plan);
	SPI_finish();
	tb->values = palloc(sizeof(Datum) * Max(desc->natts, 1));
	tb->isnull = palloc(sizeof(bool) * Max(desc->natts, 1));
	tb->argnulls = palloc(Max(desc->natts, 1));
}

/*
 * The batch's writer for table relid, locked RowExclusiveLock (the
 * function sink's batch table goes through here too).
 */
StmSinkBatch *
stm_table_sink_begin(StmSink *sink, Oid relid, const StmSinkOutput *output,
					 int64 batch_id, EState *estate)
{
	TableSinkBatch *tb = palloc0(sizeof(TableSinkBatch));
	RangeTblEntry *rte;
	TupleDesc	desc;

	tb->base.sink = sink;
	tb->base.output = output;
	tb->base.batch_id = batch_id;
	tb->base.estate = estate;
	tb->cxt = CurrentMemoryContext;
	tb->rel = OidIsValid(relid) ? try_relation_open(relid, RowExclusiveLock) : NULL;
	if (tb->rel == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_TABLE),
				 errmsg("the sink table of stream \"%s\" was dropped", sink->stream_name),
				 errhint("Drop the stream, or create the table again.")));
	desc = RelationGetDescr(tb->rel);
	tb->qualified_name = quote_qualified_identifier(get_namespace_name(RelationGetNamespace(tb->rel)),
													RelationGetRelationName(tb->rel));

	rte = makeNode(RangeTblEntry);
	rte->rtekind = RTE_RELATION;
	rte->relid = relid;
	rte->relkind = tb->rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	rte->requiredPerms = ACL_INSERT;
	for (int a = 0; a < desc->natts; a++)
		if (!TupleDescAttr(desc, a)->attisdropped && !TupleDescAttr(desc, a)->attgenerated)
			rte->insertedCols = bms_add_member(rte->insertedCols,
											   a + 1 - FirstLowInvalidHeapAttributeNumber);
	ExecCheckRTPerms(list_make1(rte), true);
	ExecInitRangeTable(estate, list_make1(rte));

	map_columns(tb);
	if (output->mode == STM_OUTPUT_UPSERT || output->mode == STM_OUTPUT_UPDATE)
		begin_changes(tb);
	tb->fast = can_use_fast_path(tb->rel);
	if (tb->fast)
	{
		tb->rri = makeNode(ResultRelInfo);
		InitResultRelInfo(tb->rri, tb->rel, 1, NULL, 0);
		ExecOpenIndices(tb->rri, false);
		tb->bistate = GetBulkInsertState();
		tb->flush_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming sink flush",
											  ALLOCSET_DEFAULT_SIZES);
	}
	else
		prepare_insert(tb);
	return &tb->base;
}

static StmSinkBatch *
table_begin_batch(StmSink *sink, const StmSinkOutput *output, int64 batch_id, EState *estate)
{
	return stm_table_sink_begin(sink, ((TableSink *) sink)->relid, output, batch_id, estate);
}

/*
 * Write the buffered rows and their index entries.  What that allocates
 * (heap_multi_insert's array of tuples, index work) goes with a reset after
 * each flush, as COPY runs it in a per-tuple context: a batch's memory does
 * not grow with its rows.
 */
static void
flush(TableSinkBatch *tb)
{
	CommandId	cid;
	MemoryContext old;

	if (tb->nbuffered == 0)
		return;
	old = MemoryContextSwitchTo(tb->flush_cxt);
	cid = GetCurrentCommandId(true);
	table_multi_insert(tb->rel, tb->slots, tb->nbuffered, cid, 0, tb->bistate);
	for (int i = 0; i < tb->nbuffered; i++)
	{
		if (tb->rri->ri_NumIndices > 0)
			list_free(ExecInsertIndexTuples(tb->rri, tb->slots[i], tb->base.estate,
											false, false, NULL, NIL));
		ExecClearTuple(tb->slots[i]);
	}
	tb->nbuffered = 0;
	MemoryContextSwitchTo(old);
	MemoryContextReset(tb->flush_cxt);
}

/* Add one row; its values are copied, so the caller may reset their memory. */
void
stm_table_sink_insert(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	TableSinkBatch *tb = (TableSinkBatch *) batch;

	if (tb->fast)
	{
		TupleTableSlot *slot = tb->slots[tb->nbuffered];

		if (slot == NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(tb->cxt);

			slot = tb->slots[tb->nbuffered] = table_slot_create(tb->rel, NULL);
			MemoryContextSwitchTo(old);
		}
		ExecClearTuple(slot);
		table_row(tb, values, nulls, slot->tts_values, slot->tts_isnull);
		ExecStoreVirtualTuple(slot);
		if (RelationGetDescr(tb->rel)->constr)
			ExecConstraints(tb->rri, slot, tb->base.estate);
		ExecMaterializeSlot(slot);
		if (++tb->nbuffered == STM_SINK_BUFFER)
			flush(tb);
	}
	else
	{
		table_row(tb, values, nulls, tb->values, tb->isnull);
		for (int a = 0; a < tb->natts; a++)
			tb->argnulls[a] = tb->isnull[a] ? 'n' : ' ';
		SPI_connect();
		if (SPI_execute_plan(tb->insert_plan, tb->values, tb->argnulls, false, 0) < 0)
			elog(ERROR, "INSERT into sink failed");
		SPI_finish();
	}
	if (tb->econtext)
		ResetExprContext(tb->econtext);
}

/* Run a statement of the sink's own (its memory is SPI's, freed after it). */
static void
execute(TableSinkBatch *tb, SPIPlanPtr *plan, const char *sql, int nargs, Oid *types,
		Datum *args, const char *nulls, int expected)
{
	int			rc;

	flush(tb);
	SPI_connect();
	if (plan && *plan == NULL)
	{
		*plan = SPI_prepare(sql, nargs, types);
		if (*plan == NULL)
			elog(ERROR, "could not prepare \"%s\": %s", sql, SPI_result_code_string(SPI_result));
		SPI_keepplan(*plan);
	}
	rc = plan ? SPI_execute_plan(*plan, args, nulls, false, 0) :
		SPI_execute_with_args(sql, nargs, types, args, nulls, false, 0);
	if (rc != expected)
		elog(ERROR, "could not write sink table %s: %s", tb->qualified_name,
			 SPI_result_code_string(rc));
	SPI_finish();
}

/*
 * INSERT INTO sink (outputs) VALUES (...) ON CONFLICT (key columns) DO
 * UPDATE; with from, the rows of that relation instead of the values.
 */
static char *
upsert_sql(TableSinkBatch *tb, const char *from)
{
	TupleDesc	out = tb->base.output->desc;
	StringInfoData sql;
	StringInfoData conflict;
	StringInfoData set;

	initStringInfo(&sql);
	initStringInfo(&conflict);
	initStringInfo(&set);
	appendStringInfo(&sql, "INSERT INTO %s AS t (", tb->qualified_name);
	for (int i = 0; i < stm_sink_output_columns(tb->base.output); i++)
	{
		const char *col = quote_identifier(NameStr(TupleDescAttr(out, i)->attname));

		appendStringInfo(&sql, "%s%s", i ? ", " : "", col);
		if (tb->base.output->is_key[i])
			appendStringInfo(&conflict, "%s%s", conflict.len ? ", " : "", col);
		else
			appendStringInfo(&set, "%s%s = EXCLUDED.%s", set.len ? ", " : "", col, col);
	}
	appendStringInfoString(&sql, ") ");
	if (from)
		appendStringInfo(&sql, "SELECT * FROM %s", quote_identifier(from));
	else
	{
		appendStringInfoString(&sql, "VALUES (");
		for (int i = 0; i < stm_sink_output_columns(tb->base.output); i++)
			appendStringInfo(&sql, "%s$%d", i ? ", " : "", i + 1);
		appendStringInfoChar(&sql, ')');
	}
	appendStringInfo(&sql, " ON CONFLICT (%s) DO %s%s", conflict.data,
					 set.len ? "UPDATE SET " : "NOTHING", set.data);
	return sql.data;
}

/* The parameters of a statement over an output row. */
static char *
output_params(TableSinkBatch *tb, bool *nulls)
{
	TupleDesc	out = tb->base.output->desc;

	if (tb->out_types == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(tb->cxt);

		tb->out_types = palloc(sizeof(Oid) * Max(out->natts, 1));
		tb->out_nulls = palloc(Max(out->natts, 1));
		for (int i = 0; i < out->natts; i++)
			tb->out_types[i] = TupleDescAttr(out, i)->atttypid;
		MemoryContextSwitchTo(old);
	}
	for (int i = 0; i < out->natts; i++)
		tb->out_nulls[i] = nulls[i] ? 'n' : ' ';
	return tb->out_nulls;
}

/* One upsert, now: INSERT ... ON CONFLICT with the row as parameters. */
static void
upsert_now(TableSinkBatch *tb, Datum *values, bool *nulls)
{
	char	   *params = output_params(tb, nulls);

	execute(tb, &tb->upsert_plan, tb->upsert_plan ? NULL : upsert_sql(tb, NULL),
			tb->base.output->desc->natts, tb->out_types, values, params, SPI_OK_INSERT);
}

/*
 * DELETE by the key columns, numbered as the outputs.  A NULL key value is
 * matched with IS NULL, so that the sink's unique index still finds the row
 * (IS NOT DISTINCT FROM would not use it); such a row (rare) gets a
 * statement of its own.
 */
static void
delete_now(TableSinkBatch *tb, Datum *values, bool *nulls)
{
	TupleDesc	out = tb->base.output->desc;
	StringInfoData sql;
	bool		any_null = false;
	char	   *params = output_params(tb, nulls);

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s WHERE true", tb->qualified_name);
	for (int i = 0; i < out->natts; i++)
	{
		const char *col = quote_identifier(NameStr(TupleDescAttr(out, i)->attname));

		if (!tb->base.output->is_key[i])
			continue;
		if (nulls[i])
			appendStringInfo(&sql, " AND %s IS NULL", col);
		else
			appendStringInfo(&sql, " AND %s = $%d", col, i + 1);
		any_null |= nulls[i];
	}
	/* the parameters that are not keys are NULL and unused */
	execute(tb, any_null ? NULL : &tb->delete_plan, sql.data, out->natts, tb->out_types,
			values, params, SPI_OK_DELETE);
}

/*
 * Upsert mode: the changes are kept by key, the latest replacing the one
 * before, when every key column's type hashes (else each is applied at once).
 */
static void
begin_changes(TableSinkBatch *tb)
{
	const StmSinkOutput *output = tb->base.output;
	TupleDesc	out = output->desc;
	AttrNumber *cols = palloc(sizeof(AttrNumber) * Max(out->natts, 1));
	Oid		   *eqops = palloc(sizeof(Oid) * Max(out->natts, 1));
	Oid		   *collations = palloc(sizeof(Oid) * Max(out->natts, 1));
	Oid		   *eqfuncs;
	FmgrInfo   *hashfuncs;
	int			nkeys = 0;

	tb->nwritten = stm_sink_output_columns(output);
	for (int i = 0; i < tb->nwritten; i++)
	{
		Form_pg_attribute att = TupleDescAttr(out, i);
		TypeCacheEntry *tc;
		Oid			left;
		Oid			right;

		if (!output->is_key[i])
			continue;
		tc = lookup_type_cache(att->atttypid, TYPECACHE_EQ_OPR);
		if (!OidIsValid(tc->eq_opr) || !get_op_hash_functions(tc->eq_opr, &left, &right))
			return;
		cols[nkeys] = i + 1;
		eqops[nkeys] = tc->eq_opr;
		collations[nkeys] = att->attcollation;
		nkeys++;
	}
	execTuplesHashPrepare(nkeys, eqops, &eqfuncs, &hashfuncs);
	tb->changes_cxt = AllocSetContextCreate(tb->cxt, "streaming upsert changes",
											ALLOCSET_DEFAULT_SIZES);
	tb->lookup_cxt = AllocSetContextCreate(tb->cxt, "streaming upsert lookup",
										   ALLOCSET_DEFAULT_SIZES);
	tb->changes = BuildTupleHashTableExt(NULL, out, nkeys, cols, eqfuncs, hashfuncs, collations,
										 1024, 0, tb->cxt, tb->changes_cxt, tb->lookup_cxt, false);
	tb->change_slot = MakeSingleTupleTableSlot(out, &TTSOpsVirtual);
}

/* The written columns of the output (without the change column), for the changes' relations. */
static TupleDesc
written_desc(TableSinkBatch *tb)
{
	TupleDesc	desc = CreateTemplateTupleDesc(tb->nwritten);

	for (int i = 0; i < tb->nwritten; i++)
		TupleDescCopyEntry(desc, i + 1, tb->base.output->desc, i + 1);
	return desc;
}

/* DELETE FROM sink AS t USING deletes AS d WHERE t.key = d.key ... */
static char *
delete_using_sql(TableSinkBatch *tb)
{
	TupleDesc	out = tb->base.output->desc;
	StringInfoData sql;
	bool		first = true;

	initStringInfo(&sql);
	appendStringInfo(&sql, "DELETE FROM %s AS t USING %s AS d WHERE ", tb->qualified_name,
					 quote_identifier(CHANGES_ENR_DELETES));
	for (int i = 0; i < tb->nwritten; i++)
	{
		const char *col = quote_identifier(NameStr(TupleDescAttr(out, i)->attname));

		if (!tb->base.output->is_key[i])
			continue;
		appendStringInfo(&sql, "%st.%s = d.%s", first ? "" : " AND ", col, col);
		first = false;
	}
	return sql.data;
}

/* The changes of the batch so far, applied: every upsert in one statement, every delete in another. */
static void
apply_changes(TableSinkBatch *tb)
{
	const StmSinkOutput *output = tb->base.output;
	TupleDesc	wdesc;
	Tuplestorestate *rows[2];
	double		nrows[2] = {0, 0};
	const char *names[2] = {CHANGES_ENR_UPSERTS, CHANGES_ENR_DELETES};
	TupleHashIterator it;
	TupleHashEntry e;
	TupleTableSlot *slot;

	if (tb->changes == NULL || tb->nchanges == 0)
		return;
	wdesc = written_desc(tb);
	rows[0] = tuplestore_begin_heap(false, false, work_mem);
	rows[1] = tuplestore_begin_heap(false, false, work_mem);
	slot = MakeSingleTupleTableSlot(output->desc, &TTSOpsMinimalTuple);
	InitTupleHashIterator(tb->changes, &it);
	while ((e = ScanTupleHashTable(tb->changes, &it)) != NULL)
	{
		bool		del;
		bool		null_key = false;

		ExecStoreMinimalTuple(e->firstTuple, slot, false);
		slot_getallattrs(slot);
		del = stm_sink_change_is_delete(output, slot->tts_values, slot->tts_isnull);
		for (int i = 0; i < tb->nwritten; i++)
			null_key |= output->is_key[i] && slot->tts_isnull[i];
		/* a NULL never equals: such a key is deleted on its own, with IS NULL */
		if (del && null_key)
		{
			delete_now(tb, slot->tts_values, slot->tts_isnull);
			continue;
		}
		tuplestore_putvalues(rows[del], wdesc, slot->tts_values, slot->tts_isnull);
		nrows[del]++;
	}
	TermTupleHashIterator(&it);
	ExecDropSingleTupleTableSlot(slot);

	SPI_connect();
	for (int k = 0; k < 2; k++)
	{
		EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));

		if (nrows[k] == 0)
			continue;
		enr->md.name = (char *) names[k];
		enr->md.reliddesc = InvalidOid;
		enr->md.tupdesc = wdesc;
		enr->md.enrtype = ENR_NAMED_TUPLESTORE;
		enr->md.enrtuples = nrows[k];
		enr->reldata = rows[k];
		if (SPI_register_relation(enr) != SPI_OK_REL_REGISTER)
			elog(ERROR, "could not register the batch's changes");
	}
	if (nrows[0] > 0 && stm_spi_execute_reading(upsert_sql(tb, CHANGES_ENR_UPSERTS), wdesc) != SPI_OK_INSERT)
		elog(ERROR, "could not upsert into sink table %s", tb->qualified_name);
	/* a join of the deletes: its plan depends on how many there are, so it is not kept */
	if (nrows[1] > 0 && SPI_execute(delete_using_sql(tb), false, 0) != SPI_OK_DELETE)
		elog(ERROR, "could not delete from sink table %s", tb->qualified_name);
	SPI_finish();
	tuplestore_end(rows[0]);
	tuplestore_end(rows[1]);
	ResetTupleHashTable(tb->changes);
	MemoryContextReset(tb->changes_cxt);
	tb->nchanges = 0;
}

/*
 * Upsert mode: a change kept as its key's latest (the row's values are
 * copied); when the changes fill half of the batch's share of memory for
 * groups, they are applied now.
 */
static void
remember_change(TableSinkBatch *tb, Datum *values, bool *nulls)
{
	TupleTableSlot *slot = tb->change_slot;
	TupleHashEntry e;
	bool		isnew;

	ExecClearTuple(slot);
	memcpy(slot->tts_values, values, sizeof(Datum) * slot->tts_tupleDescriptor->natts);
	memcpy(slot->tts_isnull, nulls, sizeof(bool) * slot->tts_tupleDescriptor->natts);
	ExecStoreVirtualTuple(slot);
	e = LookupTupleHashEntry(tb->changes, slot, &isnew, NULL);
	MemoryContextReset(tb->lookup_cxt);
	if (!isnew)
	{
		/* the same key (equal by the key's equality): the later row wins */
		MinimalTuple old = e->firstTuple;
		MemoryContext oldcxt = MemoryContextSwitchTo(tb->changes_cxt);

		e->firstTuple = ExecCopySlotMinimalTuple(slot);
		MemoryContextSwitchTo(oldcxt);
		pfree(old);
	}
	if (++tb->nchanges % 1024 == 0 &&
		MemoryContextMemAllocated(tb->changes_cxt, true) > stm_guc_groups_memory() / 2)
		apply_changes(tb);
}

/* a changed group (update mode) or a change (upsert mode), kept by key */
void
stm_table_sink_upsert(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	TableSinkBatch *tb = (TableSinkBatch *) batch;

	if (tb->changes)
		remember_change(tb, values, nulls);
	else
		upsert_now(tb, values, nulls);
}

/* update mode: a session merged away, now; upsert mode: a delete, kept by key */
void
stm_table_sink_delete_key(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	TableSinkBatch *tb = (TableSinkBatch *) batch;

	if (tb->changes && tb->base.output->mode == STM_OUTPUT_UPSERT)
		remember_change(tb, values, nulls);
	else
	{
		/* update mode: after the upserts kept so far, in their order */
		apply_changes(tb);
		delete_now(tb, values, nulls);
	}
}

void
stm_table_sink_truncate(StmSinkBatch *batch)
{
	TableSinkBatch *tb = (TableSinkBatch *) batch;

	execute(tb, NULL, psprintf("DELETE FROM %s", tb->qualified_name), 0, NULL, NULL, NULL,
			SPI_OK_DELETE);
}

void
stm_table_sink_end(StmSinkBatch *batch)
{
	TableSinkBatch *tb = (TableSinkBatch *) batch;

	apply_changes(tb);
	if (tb->fast)
	{
		flush(tb);
		ExecCloseIndices(tb->rri);
		FreeBulkInsertState(tb->bistate);
		table_finish_bulk_insert(tb->rel, 0);
		for (int i = 0; i < STM_SINK_BUFFER && tb->slots[i]; i++)
			ExecDropSingleTupleTableSlot(tb->slots[i]);
		MemoryContextDelete(tb->flush_cxt);
	}
	if (tb->insert_plan)
		SPI_freeplan(tb->insert_plan);
	if (tb->upsert_plan)
		SPI_freeplan(tb->upsert_plan);
	if (tb->delete_plan)
		SPI_freeplan(tb->delete_plan);
	if (tb->out_slot)
		ExecDropSingleTupleTableSlot(tb->out_slot);
	if (tb->change_slot)
		ExecDropSingleTupleTableSlot(tb->change_slot);
	table_close(tb->rel, NoLock);
	CommandCounterIncrement();
}

/* ---- create_stream ------------------------------------------------------ */

/*
 * CREATE TABLE for a sink table of the output's columns; keyed: a unique
 * key on the key columns that treats NULLs as equal (SPEC 3), for upserts.
 */
char *
stm_sink_table_ddl(const StmSinkOutput *out, const char *qualified_name, bool keyed)
{
	StringInfoData buf;
	bool		first = true;

	initStringInfo(&buf);
	appendStringInfo(&buf, "CREATE TABLE %s (", qualified_name);
	for (int i = 0; i < stm_sink_output_columns(out); i++)
	{
		Form_pg_attribute att = TupleDescAttr(out->desc, i);

		appendStringInfo(&buf, "%s%s %s", i > 0 ? ", " : "",
						 quote_identifier(NameStr(att->attname)),
						 format_type_extended(att->atttypid, att->atttypmod,
											  FORMAT_TYPE_TYPEMOD_GIVEN |
											  FORMAT_TYPE_FORCE_QUALIFY));
	}
	for (int i = 0; keyed && i < out->desc->natts; i++)
		if (out->is_key[i])
		{
			appendStringInfo(&buf, "%s%s", first ? ", UNIQUE NULLS NOT DISTINCT (" : ", ",
							 quote_identifier(NameStr(TupleDescAttr(out->desc, i)->attname)));
			first = false;
		}
	if (!first)
		appendStringInfoChar(&buf, ')');
	appendStringInfoChar(&buf, ')');
	return buf.data;
}

/* The sink table's name: the sink argument (SQL naming a table), or the stream's name. */
static RangeVar *
sink_relation(const StmSinkTarget *target)
{
	RangeVar   *rv;

	if (target->sink == NULL)
		return makeRangeVar(NULL, pstrdup(target->stream), -1);
	STM_ARG_ERRCONTEXT_BEGIN("sink", target->sink);
	rv = makeRangeVarFromNameList(stringToQualifiedNameList(target->sink));
	STM_ARG_ERRCONTEXT_END();
	return rv;
}

/*
 * Update mode upserts on the window and group columns: an existing sink
 * needs a unique index on exactly those columns that treats NULLs as equal
 * (NULL is one group, as in GROUP BY).  A primary key, or a unique index on
 * columns that are all NOT NULL, serves too: a NULL group then fails its
 * batch on the NOT NULL constraint instead of adding a row per batch.
 */
static void
check_sink_key(const StmSinkOutput *output, Relation sink)
{
	Bitmapset  *wanted = NULL;
	bool		all_not_null = true;
	StringInfoData names;
	List	   *indexes = RelationGetIndexList(sink);
	ListCell   *lc;

	initStringInfo(&names);
	for (int i = 0; i < output->desc->natts; i++)
		if (output->is_key[i])
		{
			const char *name = NameStr(TupleDescAttr(output->desc, i)->attname);
			AttrNumber	attno = attnameAttNum(sink, name, false);

			wanted = bms_add_member(wanted, attno);
			all_not_null &= TupleDescAttr(RelationGetDescr(sink), attno - 1)->attnotnull;
			appendStringInfo(&names, "%s%s", names.len ? ", " : "", quote_identifier(name));
		}
	if (wanted == NULL)
		return;					/* one group: rewritten as in complete mode */
	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), AccessShareLock);
		Form_pg_index form = index->rd_index;
		Bitmapset  *cols = NULL;
		bool		usable = form->indisunique && form->indimmediate &&
			(form->indnullsnotdistinct || all_not_null) &&
			RelationGetIndexPredicate(index) == NIL;

		for (int k = 0; usable && k < form->indnkeyatts; k++)
			cols = bms_add_member(cols, form->indkey.values[k]);
		index_close(index, AccessShareLock);
		if (usable && bms_equal(cols, wanted))
			return;
	}
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
			 errmsg("sink table \"%s\" needs a unique index on (%s) that treats NULLs as equal",
					RelationGetRelationName(sink), names.data),
			 output->mode == STM_OUTPUT_UPSERT ?
			 errdetail("In upsert mode each row replaces the sink's row of the same key_columns, NULLs being equal.") :
			 errdetail("In update mode each batch upserts the groups it changed, keyed by the window and group columns; NULL is one group, as in GROUP BY."),
			 errhint("ALTER TABLE %s ADD UNIQUE NULLS NOT DISTINCT (%s), or let create_stream create the sink.",
					 quote_identifier(RelationGetRelationName(sink)), names.data)));
}

/*
 * An existing sink must have a column for every output column, of a type the
 * output can be assigned to.  Extra sink columns get their defaults.
 */
static void
check_sink_columns(const StmSinkOutput *output, Relation sink, const char *stream)
{
	TupleDesc	desc = RelationGetDescr(sink);

	for (int i = 0; i < stm_sink_output_columns(output); i++)
	{
		Form_pg_attribute out = TupleDescAttr(output->desc, i);
		int			attno = -1;

		for (int a = 0; a < desc->natts; a++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, a);

			if (!att->attisdropped && strcmp(NameStr(att->attname), NameStr(out->attname)) == 0)
			{
				attno = a;
				break;
			}
		}
		if (attno < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("sink table \"%s\" of stream \"%s\" has no column \"%s\"",
							RelationGetRelationName(sink), stream, NameStr(out->attname)),
					 errhint("The sink needs a column for every column of the stream query.")));
		if (!can_coerce_type(1, &out->atttypid, &TupleDescAttr(desc, attno)->atttypid,
							 COERCION_ASSIGNMENT))
			ereport(ERROR,
					(errcode(ERRCODE_DATATYPE_MISMATCH),
					 errmsg("column \"%s\" of sink table \"%s\" is of type %s, but the stream query gives %s",
							NameStr(out->attname), RelationGetRelationName(sink),
							format_type_be(TupleDescAttr(desc, attno)->atttypid),
							format_type_be(out->atttypid))));
	}
}

/*
 * create_stream: the sink table, if it exists, must be a table with a
 * column for every output column (and in update mode the output's key);
 * it is locked until the transaction ends.  One that does not exist is
 * made by table_create_output.
 */
static void
table_check_output(StmSinkTarget *target, const StmSinkOutput *output)
{
	Relation	rel;

	target->relid = RangeVarGetRelid(sink_relation(target), RowExclusiveLock, true);
	if (!OidIsValid(target->relid))
		return;
	rel = table_open(target->relid, NoLock);
	if (rel->rd_rel->relkind != RELKIND_RELATION &&
		rel->rd_rel->relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("sink \"%s\" is not a table", target->sink ? target->sink : target->stream)));
	check_sink_columns(output, rel, target->stream);
	if (output->mode == STM_OUTPUT_UPDATE || output->mode == STM_OUTPUT_UPSERT)
		check_sink_key(output, rel);
	table_close(rel, NoLock);
}

/* A new sink table of the output's columns, keyed in update, complete and upsert mode (SPEC 3). */
static void
table_create_output(StmSinkTarget *target, const StmSinkOutput *output)
{
	RangeVar   *rv = sink_relation(target);
	Oid			nspid;

	if (OidIsValid(target->relid))
		return;
	nspid = RangeVarGetCreationNamespace(rv);
	stm_api_exec(stm_sink_table_ddl(output,
									quote_qualified_identifier(get_namespace_name(nspid), rv->relname),
									output->mode != STM_OUTPUT_APPEND),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	CommandCounterIncrement();
	target->relid = get_relname_relid(rv->relname, nspid);
}

static StmSink *
open_table_sink(StmStreamDef *def)
{
	TableSink  *ts = palloc0(sizeof(TableSink));

	ts->base.routine = &stm_table_sink_routine;
	ts->base.stream_id = def->id;
	ts->base.stream_name = pstrdup(def->name);
	ts->base.owner = def->owner;
	ts->relid = def->sink;
	return &ts->base;
}

const StmSinkRoutine stm_table_sink_routine = {
	.kind = "table",
	.display_name = "table",
	.check_output = table_check_output,
	.create_output = table_create_output,
	.open = open_table_sink,
	.begin_batch = table_begin_batch,
	.insert = stm_table_sink_insert,
	.upsert = stm_table_sink_upsert,
	.delete_key = stm_table_sink_delete_key,
	.truncate = stm_table_sink_truncate,
	.end_batch = stm_table_sink_end,
};
