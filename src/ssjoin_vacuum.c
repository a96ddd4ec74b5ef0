/*
 * ssjoin_vacuum.c: a stream-stream join's state tables vacuumed by its
 * worker between batches.
 *
 * Every batch of a busy join stores about as many rows as it evicts, so
 * each state table holds as many dead row versions as live ones after a
 * batch.  Until autovacuum comes (a naptime and a threshold later, when it
 * does) the next batches' scans step over them, and their inserts find no
 * free space: the table grows, each new page written to the file and
 * faulted in, to be vacuumed later anyway.  So the worker vacuums a side's
 * table itself once its batches have left autovacuum's own threshold of
 * dead rows (autovacuum_vacuum_threshold + autovacuum_vacuum_scale_factor
 * x rows): in transactions of VACUUM's own, after the batch committed,
 * never inside one, as autovacuum calls it.  The table keeps its size (no
 * truncation: the next batch fills the freed space again) and no parallel
 * workers start (as for the count of the state).  The freed space is what
 * the next batch's rows go into, in pages already in shared buffers.
 *
 * The tables are the extension owner's (statetable.c): VACUUM runs as that
 * role, and holds only ShareUpdateExclusiveLock, skipping a table that
 * someone else holds (autovacuum itself, say).  A failure is logged and
 * the stream goes on: autovacuum remains.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "commands/vacuum.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "postmaster/autovacuum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "ssjoin.h"
#include "statetable.h"

static bool
vacuum_due(const StmSSJoinUpkeep *upkeep, int s)
{
	return upkeep->dead[s] > 0 &&
		(double) upkeep->dead[s] > autovacuum_vac_thresh + autovacuum_vac_scale * (double) upkeep->live[s];
}

static void
vacuum_tables(List *relids)
{
	VacuumParams params;
	List	   *rels = NIL;
	ListCell   *lc;

	foreach(lc, relids)
		rels = lappend(rels, makeVacuumRelation(NULL, lfirst_oid(lc), NIL));
	memset(&params, 0, sizeof(params));
	params.options = VACOPT_VACUUM | VACOPT_SKIP_LOCKED;
	params.freeze_min_age = -1;
	params.freeze_table_age = -1;
	params.multixact_freeze_min_age = -1;
	params.multixact_freeze_table_age = -1;
	params.is_wraparound = false;
	params.log_min_duration = -1;
	params.index_cleanup = VACOPTVALUE_AUTO;
	params.truncate = VACOPTVALUE_DISABLED;
	params.nworkers = -1;
	/* commits this transaction, vacuums each in its own, starts one for us */
	vacuum(rels, &params, NULL, true);
}

/*
 * Outside any transaction, after a batch of the stream committed: vacuum
 * the sides whose dead rows are due.
 */
void
stm_ssjoin_vacuum(int32 stream_id, StmSSJoinUpkeep *upkeep)
{
	MemoryContext old = CurrentMemoryContext;
	MemoryContext cxt;
	MemoryContext save_portal = PortalContext;
	List	   *relids = NIL;
	bool		due[2];
	Oid			save_userid;
	int			save_sec_context;

	Assert(!IsTransactionState());
	for (int s = 0; s < 2; s++)
		due[s] = vacuum_due(upkeep, s);
	if (!due[0] && !due[1])
		return;
	/* vacuum() allocates under PortalContext, as in autovacuum */
	cxt = AllocSetContextCreate(old, "streaming join vacuum", ALLOCSET_DEFAULT_SIZES);
	PortalContext = cxt;
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	StartTransactionCommand();
	PG_TRY();
	{
		StmStateAccess access;

		MemoryContextSwitchTo(cxt);
		for (int s = 0; s < 2; s++)
		{
			Oid			relid;

			if (!due[s])
				continue;
			relid = get_relname_relid(stm_ssjoin_table(stream_id, s),
									  get_namespace_oid("streaming", false));
			if (OidIsValid(relid))
				relids = lappend_oid(relids, relid);
			upkeep->dead[s] = 0;
		}
		if (relids != NIL)
		{
			access = stm_statetable_begin();
			vacuum_tables(relids);
			stm_statetable_end(access);
		}
		CommitTransactionCommand();
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(old);
		edata = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		SetUserIdAndSecContext(save_userid, save_sec_context);
		ereport(LOG,
				(errmsg("could not vacuum the state tables of stream %d: %s", stream_id, edata->message)));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	MemoryContextSwitchTo(old);
	PortalContext = save_portal;
	MemoryContextDelete(cxt);
}
