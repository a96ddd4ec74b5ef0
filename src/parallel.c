/*
 * parallel.c: parallel parse per stream (create_stream's parallel_workers).
 *
 * A stream's worker (the leader) keeps N helpers for its whole runtime:
 * dynamic background workers (bgw_notify_pid = the leader) sharing one DSM
 * segment with it, two shm_mq queues each, as PostgreSQL's parallel
 * machinery and test_shm_mq make them.  PostgreSQL's ParallelContext is not
 * used: it puts the leader into parallel mode, where it may not write, and
 * the leader writes the sink while the helpers work.
 *
 *   leader                                 helper i
 *   plan (bounds of every partition)
 *   'P' share i of N+1's  ───in queue───►  fetch exactly them (its own
 *                                          client), parse, WHERE, project,
 *                                          as the stream's owner, in a
 *                                          read-only transaction
 *   sink, dead_letters   ◄──out queue───   'R' output rows (minimal tuples)
 *   groups (combine)                       'G' partial groups of aggregates:
 *                                              their states serialized
 *   the stateful step                      'S' source rows (parsed; past
 *                                              WHERE where that is safe;
 *                                              tagged with their source)
 *   late_rows                              'L' late rows kept (position,
 *                                              event time)
 *                                          'B' bad records (raw bytes,
 *                                              error, position)
 *                                          'D' done (input count, max
 *                                              event time) or 'E' its error
 *   positions, progress; COMMIT
 *
 * The leader reads the last share itself meanwhile (batch.c
 * fetch_by_helpers), draining the queues between its own chunks.
 *
 * Which a helper sends depends on the shape: a stateless query its output
 * rows, a tumbling or sliding window (or no window) its partial groups and
 * the late rows it kept.  Where the step after parsing needs the batch's
 * state or snapshot in one place (dedup_keys against the seen keys, session
 * merging, a join with tables run by the leader's executor in the batch's
 * snapshot), a helper sends its parsed source rows, and the leader runs
 * that step over them: a share's rows in their order, so each partition's
 * are in source order, as they are without helpers.
 *
 * A join of two sources (or of one under two aliases, read once) reads
 * both: a share is each source's share of its partitions (or files),
 * the second source's dealt on from where the first's ended
 * (stm_parallel_share_bounds), the 'P' message one bounds string per
 * source.  A helper sends the rows of both as 'S' messages, the header's
 * second byte naming the source (its place in the batch's inputs; 'B'
 * carries it too, for that source's on_bad_record), and the leader feeds
 * each to that source's join sides as it feeds its own rows: late rows,
 * each side's largest event time, each partition's rows in source order.
 *
 * So the leader still plans, writes and commits one transaction per batch:
 * exactly-once is unchanged.  A helper that dies or detaches, or reports an
 * error, fails the batch (an ERROR in the leader; the worker's retry runs it
 * again), and the leader replaces all its helpers before the next batch, so
 * nothing a failed batch's helpers still send is ever read.
 *
 * Helpers connect as the bootstrap superuser, as the stream's worker does
 * (an owner without LOGIN works, SPEC 7), and run each share as the
 * stream's owner (stm_batch_run_share), the query analysed as the leader
 * analyses it.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "storage/dsm.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/shm_mq.h"
#include "tcop/tcopprot.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/wait_event.h"

#include "catalog.h"
#include "interrupts.h"
#include "parallel.h"
#include "ssjoin.h"

#define STM_PAR_IN_QUEUE	(64 * 1024)		/* leader -> helper: bounds */
#define STM_PAR_OUT_QUEUE	(1024 * 1024)	/* helper -> leader: rows */
#define STM_PAR_HEADER		8				/* message type, its source ('S', 'B': the input's
											 * index), then MAXALIGNed data */

/* The segment's header; the queues follow, in and out per helper. */
typedef struct ParallelShared
{
	Oid			dboid;
	int32		stream_id;
	int			nhelpers;
	pid_t		leader_pid;
	PGPROC	   *leader_proc;	/* its latch: an idle helper wakes it */
} ParallelShared;

struct StmParallel
{
	dsm_segment *seg;
	int			n;				/* helpers registered */
	bool		dirty;			/* a batch began and did not end cleanly */
	BackgroundWorkerHandle **handles;
	shm_mq_handle **in;
	shm_mq_handle **out;
	int32		stream_id;
	char	   *name;			/* the stream's, for messages */
	/* the batch's shares, from stm_parallel_send_shares to the last drain */
	bool	   *done;			/* helper i sent 'D' */
	bool		ordered;		/* taken helper after helper (leader_first) */
	int			remaining;		/* helpers not done */
	TupleTableSlot *slot;		/* their rows */
	TupleTableSlot *group_slot; /* their partial groups (aggregates) */
};

struct StmHelperOut
{
	shm_mq_handle *mqh;
	MemoryContext cxt;			/* for one message */
};

/* The bad record message's fixed part (then message, detail, position, raw). */
typedef struct BadHeader
{
	int32		sqlerrcode;
	int32		message_len;
	int32		detail_len;		/* -1: none */
	int32		position_len;
	int32		raw_len;		/* -1: no payload */
	int32		has_sha;
	int64		whole_len;
	uint8		sha256[32];
} BadHeader;

/* The late row message's fixed part (then the position, a string). */
typedef struct LateHeader
{
	TimestampTz event_time;
	int32		isnull;
} LateHeader;

static Size
queue_offset(int i, bool out)
{
	return MAXALIGN(sizeof(ParallelShared)) +
		(Size) i * (STM_PAR_IN_QUEUE + STM_PAR_OUT_QUEUE) + (out ? STM_PAR_IN_QUEUE : 0);
}

/*
 * Can helpers read this source?  Kinds with share_bounds (Kafka, file and
 * rate sources), in every shape of one source: dedup_keys too, also where
 * the source's parts are read in an order of their own (ordered_parts: the
 * leader then takes the shares in that order, stm_parallel_send_shares).
 */
bool
stm_parallel_source_supported(const StmSourceRoutine *routine, const char **why)
{
	if (routine->share_bounds == NULL || routine->set_share_bounds == NULL)
		*why = psprintf("sources of kind \"%s\" are read by the stream's worker only", routine->kind);
	else
		return true;
	return false;
}

/*
 * Can helpers run this query?  Every shape of one source, and joins of
 * two (or of one under two aliases) whose other source helpers can read
 * too: each helper sends its share of both sources' rows, tagged with
 * their source, and the leader runs the join.
 */
bool
stm_parallel_query_supported(StmQueryInfo *qi, const char **why)
{
	if (qi->ssjoin && !qi->ssjoin->self_join)
	{
		StmSourceDef *other = stm_catalog_get_source(qi->ssjoin->sides[STM_JOIN_RIGHT_SIDE].source, true);

		if (other && !stm_parallel_source_supported(stm_source_routine(other->kind), why))
			return false;
	}
	return true;
}

/* create_stream's and alter_stream's parallel_workers argument */
void
stm_parallel_check_arg(const char *stream, int n, const StmSourceRoutine *routine,
					   StmQueryInfo *qi)
{
	const char *why;

	if (n < 0 || n > STM_MAX_PARALLEL_WORKERS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("parallel_workers must be between 0 and %d", STM_MAX_PARALLEL_WORKERS)));
	if (n > 0 && (!stm_parallel_source_supported(routine, &why) ||
				  (qi && !stm_parallel_query_supported(qi, &why))))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("stream \"%s\" cannot have parallel_workers", stream),
				 errdetail("%s.", why),
				 errhint("Parallel helpers run queries of Kafka, file and rate sources; leave parallel_workers NULL (automatic) or 0.")));
}

/*
 * The leader's helpers, for the runtime (in cxt): a DSM segment kept for
 * the session (not the transaction that made it), its queues, and as many
 * of the nhelpers as background worker slots allow (a message at elevel
 * when that is fewer).  NULL when none could be started.
 */
StmParallel *
stm_parallel_start(int32 stream_id, int nhelpers, int elevel, MemoryContext cxt)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
	StmParallel *par = palloc0(sizeof(StmParallel));
	ParallelShared *shared;
	Size		size = queue_offset(nhelpers, false);

	par->stream_id = stream_id;
	par->name = stm_catalog_text("SELECT name FROM streaming.stream_defs WHERE id = $1",
								 INT4OID, Int32GetDatum(stream_id));
	if (par->name == NULL)
		par->name = psprintf("with id %d", stream_id);
	else
		par->name = psprintf("\"%s\"", par->name);
	par->handles = palloc0(sizeof(BackgroundWorkerHandle *) * nhelpers);
	par->in = palloc0(sizeof(shm_mq_handle *) * nhelpers);
	par->out = palloc0(sizeof(shm_mq_handle *) * nhelpers);
	par->seg = dsm_create(size, 0);
	dsm_pin_mapping(par->seg);
	shared = dsm_segment_address(par->seg);
	shared->dboid = MyDatabaseId;
	shared->stream_id = stream_id;
	shared->nhelpers = nhelpers;
	shared->leader_pid = MyProcPid;
	shared->leader_proc = MyProc;

	for (int i = 0; i < nhelpers; i++)
	{
		BackgroundWorker worker;
		char	   *base = dsm_segment_address(par->seg);
		shm_mq	   *inq = shm_mq_create(base + queue_offset(i, false), STM_PAR_IN_QUEUE);
		shm_mq	   *outq = shm_mq_create(base + queue_offset(i, true), STM_PAR_OUT_QUEUE);

		shm_mq_set_sender(inq, MyProc);
		shm_mq_set_receiver(outq, MyProc);
		memset(&worker, 0, sizeof(worker));
		worker.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
		worker.bgw_start_time = BgWorkerStart_ConsistentState;
		worker.bgw_restart_time = BGW_NEVER_RESTART;
		snprintf(worker.bgw_library_name, BGW_MAXLEN, "streaming");
		snprintf(worker.bgw_function_name, BGW_MAXLEN, "streaming_helper_main");
		snprintf(worker.bgw_name, BGW_MAXLEN, "streaming helper %d of stream %d", i, stream_id);
		snprintf(worker.bgw_type, BGW_MAXLEN, "streaming helper");
		worker.bgw_main_arg = UInt32GetDatum(dsm_segment_handle(par->seg));
		memcpy(worker.bgw_extra, &i, sizeof(int));
		worker.bgw_notify_pid = MyProcPid;
		if (!RegisterDynamicBackgroundWorker(&worker, &par->handles[par->n]))
			break;
		par->in[par->n] = shm_mq_attach(inq, par->seg, par->handles[par->n]);
		par->out[par->n] = shm_mq_attach(outq, par->seg, par->handles[par->n]);
		par->n++;
	}
	shared->nhelpers = par->n;
	MemoryContextSwitchTo(oldcxt);
	if (par->n < nhelpers && par->n > 0)
		ereport(elevel,
				(errmsg("stream %s started %d of its %d parallel helpers",
						par->name, par->n, nhelpers),
				 errdetail("No more background worker slots are free."),
				 errhint("Raise max_worker_processes.")));
	if (par->n == 0)
	{
		stm_parallel_stop(par);
		return NULL;
	}
	return par;
}

/* how many helpers were started */
int
stm_parallel_count(StmParallel *par)
{
	return par->n;
}

bool
stm_parallel_dirty(StmParallel *par)
{
	return par->dirty;
}

/*
 * The helpers go: the queues detached (an idle helper then exits by
 * itself), told to stop when a batch of theirs failed (they may be in the
 * middle of a fetch), their exits waited for.
 */
void
stm_parallel_stop(StmParallel *par)
{
	if (par == NULL)
		return;
	if (par->dirty)
		for (int i = 0; i < par->n; i++)
			TerminateBackgroundWorker(par->handles[i]);
	for (int i = 0; i < par->n; i++)
	{
		shm_mq_detach(par->in[i]);
		shm_mq_detach(par->out[i]);
	}
	dsm_detach(par->seg);
	for (int i = 0; i < par->n; i++)
		(void) WaitForBackgroundWorkerShutdown(par->handles[i]);
	pfree(par);
}

/* The same without waiting (on error): the helpers see their queues detach. */
void
stm_parallel_abandon(StmParallel *par)
{
	if (par == NULL)
		return;
	for (int i = 0; i < par->n; i++)
		TerminateBackgroundWorker(par->handles[i]);
	dsm_detach(par->seg);
}

static void
helper_gone(StmParallel *par, int i)
{
	par->dirty = true;
	ereport(ERROR,
			(errcode(ERRCODE_SYSTEM_ERROR),
			 errmsg("parallel helper %d of stream %s exited during the batch", i, par->name),
			 errdetail("The batch is rolled back; it runs again with new helpers.")));
}

/* one message of helper i: false when it was the last of the batch ('D') */
static bool
receive_message(StmParallel *par, int i, const char *data, Size len, TupleTableSlot *slot,
				TupleTableSlot *group_slot, StmParallelReceiver *recv, StmShareTotals *totals)
{
	const char *body = data + STM_PAR_HEADER;

	switch (data[0])
	{
		case 'G':
			if (group_slot == NULL)
			{
				par->dirty = true;
				elog(ERROR, "parallel helper %d sent a partial group to a stateless batch", i);
			}
			ExecStoreMinimalTuple((MinimalTuple) body, group_slot, false);
			slot_getallattrs(group_slot);
			recv->group(recv->arg, group_slot->tts_values, group_slot->tts_isnull);
			ExecClearTuple(group_slot);
			return true;
		case 'R':
			ExecStoreMinimalTuple((MinimalTuple) body, slot, false);
			slot_getallattrs(slot);
			recv->row(recv->arg, slot->tts_values, slot->tts_isnull);
			ExecClearTuple(slot);
			return true;
		case 'S':
			/* valid until the next receive: the leader copies it */
			recv->source_row(recv->arg, data[1], (MinimalTuple) body);
			return true;
		case 'L':
			{
				LateHeader	h;

				memcpy(&h, body, sizeof(LateHeader));
				recv->late(recv->arg, body + sizeof(LateHeader), h.event_time, h.isnull);
				return true;
			}
		case 'B':
			{
				BadHeader	h;
				StmBadRecord bad;
				const char *p = body + sizeof(BadHeader);

				memcpy(&h, body, sizeof(BadHeader));
				bad.sqlerrcode = h.sqlerrcode;
				bad.message = p;
				p += h.message_len + 1;
				bad.detail = NULL;
				if (h.detail_len >= 0)
				{
					bad.detail = p;
					p += h.detail_len + 1;
				}
				bad.position = p;
				p += h.position_len + 1;
				bad.raw = h.raw_len >= 0 ? p : NULL;
				bad.raw_len = Max(h.raw_len, 0);
				bad.whole_len = h.whole_len;
				bad.sha256 = h.has_sha ? h.sha256 : NULL;
				recv->bad(recv->arg, data[1], &bad);
				return true;
			}
		case 'D':
			{
				StmShareTotals t;

				memcpy(&t, body, sizeof(t));
				totals->num_input += t.num_input;
				totals->num_late += t.num_late;
				if (t.has_max_event_time &&
					(!totals->has_max_event_time || t.max_event_time > totals->max_event_time))
				{
					totals->has_max_event_time = true;
					totals->max_event_time = t.max_event_time;
				}
				return false;
			}
		case 'E':
			{
				int32		code;
				const char *message = body + sizeof(int32);
				const char *detail = message + strlen(message) + 1;

				memcpy(&code, body, sizeof(int32));
				par->dirty = true;
				ereport(ERROR,
						(errcode(code),
						 errmsg_internal("%s", message),
						 *detail ? errdetail_internal("%s", detail) : 0,
						 errcontext("parallel helper %d of stream %s", i, par->name)));
			}
			break;
		default:
			par->dirty = true;
			elog(ERROR, "parallel helper %d sent an unknown message type %d", i, data[0]);
	}
	return false;
}

/*
 * Source k's part of share `share` of nshares.  A join's second source
 * deals its parts on from where the first's ended (its share index
 * rotated by the first's parts), so that the two sources' parts together
 * spread evenly over the shares rather than both piling their extra
 * parts on the first shares.
 */
char *
stm_parallel_share_bounds(StmSource **srcs, int nsrcs, int k, int share, int nshares)
{
	int			before = 0;

	for (int m = 0; m < k; m++)
		if (srcs[m]->routine->share_parts)
			before += srcs[m]->routine->share_parts(srcs[m]);
	return srcs[k]->routine->share_bounds(srcs[k], ((share - before) % nshares + nshares) % nshares,
										  nshares);
}

/*
 * The batch's shares go to the helpers: share i of nshares (the leader's
 * plan fixed the bounds; nshares is n + 1 when the leader reads the last
 * share itself).  Then stm_parallel_drain takes their rows, groups and bad
 * records as they come, from whichever queue has some, until every helper
 * said it is done.
 *
 * leader_first: the shares are taken in their order, as one source read
 * from start to end (dedup_keys over a source with ordered_parts, whose
 * shares are consecutive runs of it): the leader reads share 0 itself
 * first, helper i reads share i + 1, and stm_parallel_drain takes helper
 * i's messages only once helpers 0 to i - 1 are done (a helper further on
 * waits on its full queue meanwhile).
 */
void
stm_parallel_send_shares(StmParallel *par, StmSource **srcs, int nsrcs, int nshares,
						 bool leader_first, TupleDesc desc, TupleDesc partial_desc)
{
	par->dirty = true;
	par->done = palloc0(sizeof(bool) * par->n);
	par->ordered = leader_first;
	par->remaining = par->n;
	par->slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
	par->group_slot = partial_desc ?
		MakeSingleTupleTableSlot(partial_desc, &TTSOpsMinimalTuple) : NULL;
	for (int i = 0; i < par->n; i++)
	{
		StringInfoData msg;

		initStringInfo(&msg);
		appendStringInfoChar(&msg, 'P');
		/* each source's bounds, NUL-terminated, in the batch's order of sources */
		for (int k = 0; k < nsrcs; k++)
		{
			char	   *bounds = stm_parallel_share_bounds(srcs, nsrcs, k,
														   leader_first ? i + 1 : i, nshares);

			appendBinaryStringInfo(&msg, bounds, strlen(bounds) + 1);
			pfree(bounds);
		}
		if (shm_mq_send(par->in[i], msg.len, msg.data, false, true) != SHM_MQ_SUCCESS)
			helper_gone(par, i);
		pfree(msg.data);
	}
}

/*
 * What the helpers sent of the batch's shares: with wait, until each is
 * done; without, what the queues hold now (the leader, between chunks of
 * its own share, so that no helper waits long on a full queue).  True once
 * every helper is done.  Shares taken in order (leader_first): only the
 * first helper not done yet is read.
 */
bool
stm_parallel_drain(StmParallel *par, StmParallelReceiver *recv, StmShareTotals *totals,
				   bool wait)
{
	if (par->done == NULL)
		return true;			/* drained already */
	while (par->remaining > 0)
	{
		bool		progress = false;

		for (int i = 0; i < par->n; i++)
		{
			if (par->ordered && i > 0 && !par->done[i - 1])
				break;			/* helper i's rows come after i - 1's */
			/* a few messages of each in turn, so that no queue stays full */
			for (int k = 0; k < 256 && !par->done[i]; k++)
			{
				Size		len;
				void	   *data;
				shm_mq_result res = shm_mq_receive(par->out[i], &len, &data, true);

				if (res == SHM_MQ_WOULD_BLOCK)
					break;
				if (res != SHM_MQ_SUCCESS)
					helper_gone(par, i);
				progress = true;
				if (!receive_message(par, i, data, len, par->slot, par->group_slot, recv,
									 totals))
				{
					par->done[i] = true;
					par->remaining--;
				}
			}
		}
		stm_check_for_interrupts();
		if (progress)
			continue;
		if (!wait)
			return false;
		if (par->remaining > 0)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 200, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
	}
	ExecDropSingleTupleTableSlot(par->slot);
	if (par->group_slot)
		ExecDropSingleTupleTableSlot(par->group_slot);
	pfree(par->done);
	par->slot = par->group_slot = NULL;
	par->done = NULL;
	par->dirty = false;
	return true;
}

/* ---- the helper ------------------------------------------------------- */

static void
send_or_exit(StmHelperOut *out, shm_mq_iovec *iov, int n)
{
	if (shm_mq_sendv(out->mqh, iov, n, false, false) != SHM_MQ_SUCCESS)
		proc_exit(0);			/* the leader went: so does its batch */
}

/* A row of desc to the leader, as a minimal tuple, in a message of type. */
static void
send_tuple(StmHelperOut *out, char type, int input, TupleDesc desc, Datum *values, bool *nulls)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(out->cxt);
	MinimalTuple tup = heap_form_minimal_tuple(desc, values, nulls);
	char		header[STM_PAR_HEADER] = {type, (char) input};
	shm_mq_iovec iov[2];

	iov[0].data = header;
	iov[0].len = STM_PAR_HEADER;
	iov[1].data = (const char *) tup;
	iov[1].len = tup->t_len;
	send_or_exit(out, iov, 2);
	MemoryContextSwitchTo(oldcxt);
	MemoryContextReset(out->cxt);
}

/* An output row to the leader (stateless queries). */
void
stm_parallel_send_row(StmHelperOut *out, TupleDesc desc, Datum *values, bool *nulls)
{
	send_tuple(out, 'R', 0, desc, values, nulls);
}

/*
 * A parsed source row to the leader, which runs the stateful step over it;
 * input: which of the batch's sources it is of (a join's side).
 */
void
stm_parallel_send_source_row(StmHelperOut *out, int input, TupleDesc desc, Datum *values,
							 bool *nulls)
{
	send_tuple(out, 'S', input, desc, values, nulls);
}

/* A late row kept (late_rows => 'keep'): the leader writes it to streaming.late_rows. */
void
stm_parallel_send_late(StmHelperOut *out, const char *position, TimestampTz event_time,
					   bool isnull)
{
	char		header[STM_PAR_HEADER] = {'L'};
	LateHeader	h;
	shm_mq_iovec iov[3];

	memset(&h, 0, sizeof(h));
	h.event_time = event_time;
	h.isnull = isnull;
	iov[0].data = header;
	iov[0].len = STM_PAR_HEADER;
	iov[1].data = (const char *) &h;
	iov[1].len = sizeof(h);
	iov[2].data = position;
	iov[2].len = strlen(position) + 1;
	send_or_exit(out, iov, 3);
}

/* A partial group to the leader (aggregates: stm_aggbatch_partial_desc). */
void
stm_parallel_send_group(StmHelperOut *out, TupleDesc desc, Datum *values, bool *nulls)
{
	send_tuple(out, 'G', 0, desc, values, nulls);
}

/* A bad record to the leader, which applies on_bad_record to it. */
void
stm_parallel_send_bad(StmHelperOut *out, int input, const StmBadRecord *bad)
{
	char		header[STM_PAR_HEADER] = {'B', (char) input};
	BadHeader	h;
	shm_mq_iovec iov[6];
	int			n = 0;

	memset(&h, 0, sizeof(h));
	h.sqlerrcode = bad->sqlerrcode;
	h.message_len = strlen(bad->message);
	h.detail_len = bad->detail ? strlen(bad->detail) : -1;
	h.position_len = strlen(bad->position);
	h.raw_len = bad->raw ? bad->raw_len : -1;
	h.whole_len = bad->whole_len;
	h.has_sha = bad->sha256 != NULL;
	if (bad->sha256)
		memcpy(h.sha256, bad->sha256, 32);
	iov[n].data = header;
	iov[n++].len = STM_PAR_HEADER;
	iov[n].data = (const char *) &h;
	iov[n++].len = sizeof(h);
	iov[n].data = bad->message;
	iov[n++].len = h.message_len + 1;
	if (bad->detail)
	{
		iov[n].data = bad->detail;
		iov[n++].len = h.detail_len + 1;
	}
	iov[n].data = bad->position;
	iov[n++].len = h.position_len + 1;
	if (bad->raw)
	{
		iov[n].data = bad->raw;
		iov[n++].len = bad->raw_len;
	}
	send_or_exit(out, iov, n);
}

/* The share is done: what it amounted to. */
void
stm_parallel_send_done(StmHelperOut *out, const StmShareTotals *totals)
{
	char		header[STM_PAR_HEADER] = {'D'};
	shm_mq_iovec iov[2];

	iov[0].data = header;
	iov[0].len = STM_PAR_HEADER;
	iov[1].data = (const char *) totals;
	iov[1].len = sizeof(StmShareTotals);
	if (shm_mq_sendv(out->mqh, iov, 2, false, true) != SHM_MQ_SUCCESS)
		proc_exit(0);
}

/* The share failed: its error, raised again in the leader. */
void
stm_parallel_send_error(StmHelperOut *out, ErrorData *edata)
{
	char		header[STM_PAR_HEADER] = {'E'};
	int32		code = edata->sqlerrcode;
	const char *detail = edata->detail ? edata->detail : "";
	shm_mq_iovec iov[4];

	iov[0].data = header;
	iov[0].len = STM_PAR_HEADER;
	iov[1].data = (const char *) &code;
	iov[1].len = sizeof(int32);
	iov[2].data = edata->message ? edata->message : "error in a parallel helper";
	iov[2].len = strlen(iov[2].data) + 1;
	iov[3].data = detail;
	iov[3].len = strlen(detail) + 1;
	if (shm_mq_sendv(out->mqh, iov, 4, false, true) != SHM_MQ_SUCCESS)
		proc_exit(0);
}

/* A helper's end of its leader's segment. */
struct StmHelperLink
{
	dsm_segment *seg;
	ParallelShared *shared;
	shm_mq_handle *in;
	StmHelperOut out;
};

/*
 * Attach a helper to its leader's segment (main_arg, and its index in
 * bgw_extra), before it connects to the database: NULL when the leader
 * gave up on its helpers already.
 */
StmHelperLink *
stm_parallel_helper_attach(Datum main_arg, int index)
{
	StmHelperLink *link = palloc0(sizeof(StmHelperLink));
	char	   *base;

	link->seg = dsm_attach(DatumGetUInt32(main_arg));
	if (link->seg == NULL)
		return NULL;
	base = dsm_segment_address(link->seg);
	link->shared = (ParallelShared *) base;
	shm_mq_set_receiver((shm_mq *) (base + queue_offset(index, false)), MyProc);
	shm_mq_set_sender((shm_mq *) (base + queue_offset(index, true)), MyProc);
	link->in = shm_mq_attach((shm_mq *) (base + queue_offset(index, false)), link->seg, NULL);
	link->out.mqh = shm_mq_attach((shm_mq *) (base + queue_offset(index, true)), link->seg, NULL);
	link->out.cxt = AllocSetContextCreate(TopMemoryContext, "streaming helper message",
										  ALLOCSET_SMALL_SIZES);
	return link;
}

Oid
stm_parallel_helper_database(StmHelperLink *link)
{
	return link->shared->dboid;
}

int32
stm_parallel_helper_stream(StmHelperLink *link)
{
	return link->shared->stream_id;
}

StmHelperOut *
stm_parallel_helper_out(StmHelperLink *link)
{
	return &link->out;
}

/*
 * The leader's next share, without waiting: its bounds (in the current
 * memory context) and STM_SHARE_READY, STM_SHARE_NONE when there is none
 * yet, STM_SHARE_DETACHED when the leader detached.
 */
StmShareNext
stm_parallel_helper_next(StmHelperLink *link, char **bounds)
{
	Size		len;
	void	   *data;
	shm_mq_result res = shm_mq_receive(link->in, &len, &data, true);

	if (res == SHM_MQ_WOULD_BLOCK)
		return STM_SHARE_NONE;
	if (res != SHM_MQ_SUCCESS)
		return STM_SHARE_DETACHED;
	/* one NUL-terminated bounds string per source of the batch */
	*bounds = palloc(len);
	memcpy(*bounds, (char *) data + 1, len - 1);
	(*bounds)[len - 1] = '\0';
	return STM_SHARE_READY;
}

/* An idle helper saw records arrive: the leader's source only plans. */
void
stm_parallel_wake_leader(StmHelperLink *link)
{
	SetLatch(&link->shared->leader_proc->procLatch);
}
