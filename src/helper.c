/*
 * helper.c: a parallel helper's life (parallel_workers; parallel.c is the
 * leader's side and the queues).
 *
 * A helper attaches to its leader's segment, connects as the bootstrap
 * superuser (as the leader does: an owner without LOGIN works, SPEC 7),
 * then runs one share per message of the leader, each in a transaction of
 * its own that writes nothing (stm_batch_run_share, as the stream's
 * owner), until the leader detaches: it stopped its helpers, or exited.
 * Between shares it watches its source (its client fetches on after the
 * last share): records that arrive set the leader's latch, as the leader's
 * own source only plans and would see them only after streaming.naptime.
 */
#include "postgres.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

#include "batch.h"
#include "guc.h"
#include "helper.h"

/*
 * The leader's next share (its bounds), or NULL when the leader detached.
 * A reload of the configuration is taken meanwhile, between shares, as
 * the leader takes it between batches: a share runs with the settings its
 * leader's batch has.
 */
static char *
next_share(StmRuntime *rt, StmHelperLink *link)
{
	char	   *bounds;

	for (;;)
	{
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		switch (stm_parallel_helper_next(link, &bounds))
		{
			case STM_SHARE_READY:
				return bounds;
			case STM_SHARE_DETACHED:
				return NULL;
			case STM_SHARE_NONE:
				break;
		}
		if (stm_runtime_wait(rt, stm_guc_naptime_ms))
			stm_parallel_wake_leader(link);
		CHECK_FOR_INTERRUPTS();
	}
}

/* One share in a transaction of its own; its outcome to the leader. */
static void
run_share(StmRuntime *rt, StmHelperOut *out, const char *bounds, MemoryContext helper_cxt,
		  MemoryContext share_cxt)
{
	StmShareTotals totals;

	memset(&totals, 0, sizeof(totals));
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	PG_TRY();
	{
		pgstat_report_activity(STATE_RUNNING, "streaming helper share");
		stm_batch_run_share(rt, bounds, out, &totals);
		PopActiveSnapshot();
		CommitTransactionCommand();
		MemoryContextSwitchTo(helper_cxt);
		stm_parallel_send_done(out, &totals);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(share_cxt);
		edata = CopyErrorData();
		EmitErrorReport();
		FlushErrorState();
		AbortCurrentTransaction();
		MemoryContextSwitchTo(helper_cxt);
		stm_parallel_send_error(out, edata);
	}
	PG_END_TRY();
}

void
streaming_helper_main(Datum main_arg)
{
	StmHelperLink *link;
	int			index;
	MemoryContext helper_cxt;
	MemoryContext share_cxt;
	StmRuntime *rt;

	pqsignal(SIGTERM, die);
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	BackgroundWorkerUnblockSignals();
	memcpy(&index, MyBgworkerEntry->bgw_extra, sizeof(int));
	link = stm_parallel_helper_attach(main_arg, index);
	if (link == NULL)
		proc_exit(0);			/* the leader gave up on its helpers already */

	/* as the bootstrap superuser, as the leader: each share runs as the owner */
	BackgroundWorkerInitializeConnectionByOid(stm_parallel_helper_database(link), InvalidOid, 0);
	/* which stream's helper it is, in pg_stat_activity.application_name */
	pgstat_report_appname(MyBgworkerEntry->bgw_name);

	helper_cxt = AllocSetContextCreate(TopMemoryContext, "streaming helper",
									   ALLOCSET_DEFAULT_SIZES);
	share_cxt = AllocSetContextCreate(helper_cxt, "streaming helper share",
									  ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(helper_cxt);
	rt = stm_runtime_create(stm_parallel_helper_stream(link));

	for (;;)
	{
		char	   *bounds;

		pgstat_report_activity(STATE_IDLE, NULL);
		MemoryContextReset(share_cxt);
		MemoryContextSwitchTo(share_cxt);
		bounds = next_share(rt, link);
		MemoryContextSwitchTo(helper_cxt);
		if (bounds == NULL)
			break;
		run_share(rt, stm_parallel_helper_out(link), bounds, helper_cxt, share_cxt);
	}
	proc_exit(0);
}
