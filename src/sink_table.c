/*
 * sink_table.c: the table sink.
 *
 * Fast path (a plain heap table without row triggers, row-level security or
 * generated columns, which is what create_stream makes): rows are buffered
 * and written with table_multi_insert, then their index entries are made with
 * ExecInsertIndexTuples and constraints checked with ExecConstraints: the
 * same steps COPY FROM takes.  Anything else goes through a prepared INSERT
 * per row, so triggers, partition routing, RLS and foreign tables behave as
 * for any INSERT.
 *
 * Permissions are checked once when the sink is opened (ExecCheckRTPerms on
 * a range-table entry asking for INSERT), as the executor would.
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_class.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"

#include "sink_table.h"

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

static void
prepare_slow_path(StmSink *sink)
{
	TupleDesc	desc = RelationGetDescr(sink->rel);
	StringInfoData sql;
	StringInfoData vals;
	int			n = 0;

	initStringInfo(&sql);
	initStringInfo(&vals);
	appendStringInfo(&sql, "INSERT INTO %s.%s (",
					 quote_identifier(get_namespace_name(RelationGetNamespace(sink->rel))),
					 quote_identifier(RelationGetRelationName(sink->rel)));
	sink->argtypes = palloc(sizeof(Oid) * desc->natts);
	sink->argnulls = palloc(desc->natts);
	for (int a = 0; a < desc->natts; a++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, a);

		if (att->attisdropped || att->attgenerated)
			continue;
		appendStringInfo(&sql, "%s%s", n > 0 ? ", " : "", quote_identifier(NameStr(att->attname)));
		appendStringInfo(&vals, "%s$%d", n > 0 ? ", " : "", a + 1);
		n++;
	}
	/* parameters are numbered by attribute; dropped ones stay unused */
	for (int a = 0; a < desc->natts; a++)
		sink->argtypes[a] = TupleDescAttr(desc, a)->attisdropped ?
			INT4OID : TupleDescAttr(desc, a)->atttypid;
	appendStringInfo(&sql, ") VALUES (%s)", vals.data);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	sink->plan = SPI_prepare(sql.data, desc->natts, sink->argtypes);
	if (sink->plan == NULL)
		elog(ERROR, "could not prepare INSERT into sink: %s", SPI_result_code_string(SPI_result));
	SPI_keepplan(sink->plan);
	SPI_finish();
}

/*
 * Open the sink for one batch.  rel is locked RowExclusiveLock by the caller;
 * estate is the batch's executor state.
 */
StmSink *
stm_sink_open(Relation rel, EState *estate)
{
	StmSink    *sink = palloc0(sizeof(StmSink));
	RangeTblEntry *rte = makeNode(RangeTblEntry);
	TupleDesc	desc = RelationGetDescr(rel);

	rte->rtekind = RTE_RELATION;
	rte->relid = RelationGetRelid(rel);
	rte->relkind = rel->rd_rel->relkind;
	rte->rellockmode = RowExclusiveLock;
	rte->requiredPerms = ACL_INSERT;
	for (int a = 0; a < desc->natts; a++)
		if (!TupleDescAttr(desc, a)->attisdropped)
			rte->insertedCols = bms_add_member(rte->insertedCols,
											   a + 1 - FirstLowInvalidHeapAttributeNumber);
	ExecCheckRTPerms(list_make1(rte), true);
	ExecInitRangeTable(estate, list_make1(rte));

	sink->rel = rel;
	sink->estate = estate;
	sink->fast = can_use_fast_path(rel);
	if (sink->fast)
	{
		sink->rri = makeNode(ResultRelInfo);
		InitResultRelInfo(sink->rri, rel, 1, NULL, 0);
		ExecOpenIndices(sink->rri, false);
		for (int i = 0; i < STM_SINK_BUFFER; i++)
			sink->slots[i] = table_slot_create(rel, NULL);
		sink->bistate = GetBulkInsertState();
		sink->cid = GetCurrentCommandId(true);
		sink->flush_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming sink flush",
												ALLOCSET_DEFAULT_SIZES);
	}
	else
		prepare_slow_path(sink);
	return sink;
}

/* Add one row; values are copied, so the caller may reset their memory. */
void
stm_sink_put(StmSink *sink, Datum *values, bool *nulls)
{
	TupleDesc	desc = RelationGetDescr(sink->rel);

	sink->rows++;
	if (sink->fast)
	{
		TupleTableSlot *slot = sink->slots[sink->nbuffered];

		ExecClearTuple(slot);
		memcpy(slot->tts_values, values, sizeof(Datum) * desc->natts);
		memcpy(slot->tts_isnull, nulls, sizeof(bool) * desc->natts);
		ExecStoreVirtualTuple(slot);
		if (desc->constr)
			ExecConstraints(sink->rri, slot, sink->estate);
		ExecMaterializeSlot(slot);
		if (++sink->nbuffered == STM_SINK_BUFFER)
			stm_sink_flush(sink);
	}
	else
	{
		for (int a = 0; a < desc->natts; a++)
			sink->argnulls[a] = nulls[a] ? 'n' : ' ';
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		if (SPI_execute_plan(sink->plan, values, sink->argnulls, false, 0) < 0)
			elog(ERROR, "INSERT into sink failed");
		SPI_finish();
	}
}

/*
 * Write the buffered rows and their index entries.  What that allocates
 * (heap_multi_insert's array of tuples, index work) goes with a reset after
 * each flush, as COPY runs it in its per-tuple context: a batch's memory
 * does not grow with its rows.
 */
void
stm_sink_flush(StmSink *sink)
{
	MemoryContext oldcxt;

	if (!sink->fast || sink->nbuffered == 0)
		return;
	oldcxt = MemoryContextSwitchTo(sink->flush_cxt);
	table_multi_insert(sink->rel, sink->slots, sink->nbuffered, sink->cid, 0,
					   sink->bistate);
	for (int i = 0; i < sink->nbuffered; i++)
	{
		if (sink->rri->ri_NumIndices > 0)
		{
			List	   *recheck;

			recheck = ExecInsertIndexTuples(sink->rri, sink->slots[i], sink->estate,
											false, false, NULL, NIL);
			list_free(recheck);
		}
		ExecClearTuple(sink->slots[i]);
	}
	sink->nbuffered = 0;
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(sink->flush_cxt);
}

void
stm_sink_close(StmSink *sink)
{
	stm_sink_flush(sink);
	if (sink->fast)
	{
		ExecCloseIndices(sink->rri);
		FreeBulkInsertState(sink->bistate);
		table_finish_bulk_insert(sink->rel, 0);
		for (int i = 0; i < STM_SINK_BUFFER; i++)
			ExecDropSingleTupleTableSlot(sink->slots[i]);
		MemoryContextDelete(sink->flush_cxt);
	}
	else if (sink->plan)
		SPI_freeplan(sink->plan);
	CommandCounterIncrement();
}
