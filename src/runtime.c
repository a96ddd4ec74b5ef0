/*
 * runtime.c: what a stream keeps between its batches (runtime.h).
 *
 * A runtime lives as long as one process runs the stream's batches: a
 * worker's life, one run_batch call, a parallel helper's life.  Its
 * sources and sink are opened by the first batch that needs them, in the
 * runtime's memory context, and let go of in stm_runtime_close; its
 * parallel helpers are started by the first batch that has records and
 * replaced when a batch failed while they worked.  The batch itself
 * (batch.c) asks the runtime for them and never keeps them.
 *
 * The stream's lock lives here too: the process that runs a stream's
 * batches holds it (a worker for its life, run_batch for its
 * transaction), so that one stream never runs in two places.
 */
#include "postgres.h"

#include <sched.h>
#include <unistd.h>

#include "access/xact.h"
#include "storage/fd.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "api.h"
#include "guc.h"
#include "interrupts.h"
#include "parallel.h"
#include "runtime.h"
#include "shmem.h"
#include "ssjoin.h"

/* an automatic stream that got no helpers tries again after this long */
#define STM_HELPER_RETRY_MS 10000

/*
 * The CPUs a cgroup v2 quota allows this process ("max" or none: INT_MAX):
 * the smallest cpu.max of its cgroup and of the cgroups above it, rounded
 * up to whole CPUs.
 */
static int
cgroup_cpu_quota(void)
{
	const char *root = "/sys/fs/cgroup";
	char		line[MAXPGPATH];
	char		dir[MAXPGPATH] = "";
	int			best = INT_MAX;
	FILE	   *f = AllocateFile("/proc/self/cgroup", "r");

	if (f == NULL)
		return best;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::/", 4) == 0)
		{
			/* "0::/a/b\n" -> "/sys/fs/cgroup/a/b", the root without a slash */
			line[strcspn(line, "\n")] = '\0';
			snprintf(dir, sizeof(dir), "%s%s", root, strcmp(line + 3, "/") == 0 ? "" : line + 3);
		}
	FreeFile(f);
	while (strncmp(dir, root, strlen(root)) == 0)
	{
		char		path[MAXPGPATH];
		char		quota[32];
		long		period;

		snprintf(path, sizeof(path), "%s/cpu.max", dir);
		if ((f = AllocateFile(path, "r")) != NULL)
		{
			long		q;

			if (fscanf(f, "%31s %ld", quota, &period) == 2 && period > 0 &&
				(q = strtol(quota, NULL, 10)) > 0)	/* "max": no quota */
				best = Min(best, (int) ((q + period - 1) / period));
			FreeFile(f);
		}
		if (strlen(dir) == strlen(root))
			break;
		*strrchr(dir, '/') = '\0';
	}
	return best;
}

StmRuntime *
stm_runtime_create(int32 stream_id)
{
	StmRuntime *rt = palloc0(sizeof(StmRuntime));

	rt->cxt = CurrentMemoryContext;
	rt->stream_id = stream_id;
	rt->started_at = GetCurrentTimestamp();
	return rt;
}

/*
 * The stream's sources, opened by the runtime's first batch (for a worker,
 * once in its life; again after the helpers changed who fetches): they
 * live in the runtime's memory context.  A stream reads one source, or a
 * join's two: the left side's, then the right side's.
 */
List *
stm_runtime_open_sources(StmRuntime *rt, StmStreamDef *def)
{
	ListCell   *lc;

	if (rt->sources == NIL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(rt->cxt);
		StmSourceRuntime *srt = palloc0(sizeof(StmSourceRuntime));

		srt->def = stm_catalog_get_source_of_stream(def);
		rt->sources = list_make1(srt);
		/* a join's right side, when it is another source (a self-join reads one) */
		if (def->other_source)
		{
			srt = palloc0(sizeof(StmSourceRuntime));
			srt->def = stm_catalog_get_other_source_of_stream(def);
			rt->sources = lappend(rt->sources, srt);
		}
		MemoryContextSwitchTo(oldcxt);
	}
	foreach(lc, rt->sources)
	{
		StmSourceRuntime *srt = lfirst(lc);

		if (srt->src == NULL)
		{
			MemoryContext oldcxt = MemoryContextSwitchTo(rt->cxt);

			srt->src = stm_source_open(srt->def, def->owner, true);
			srt->src->bounded = rt->bounded;
			srt->src->low_latency = rt->low_latency;
			/* an automatic stream's helpers start with this batch unless they wait to retry */
			srt->src->plan_only = rt->parallel_wanted > 0 &&
				(rt->parallel != NULL || def->parallel_workers >= 0 ||
				 GetCurrentTimestamp() >= rt->parallel_retry_at);
			MemoryContextSwitchTo(oldcxt);
		}
	}
	return rt->sources;
}

/* The sink, opened by the runtime's first batch, as the sources. */
StmSink *
stm_runtime_open_sink(StmRuntime *rt, StmStreamDef *def)
{
	if (rt->sink == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(rt->cxt);

		rt->sink = stm_sink_open(def);
		MemoryContextSwitchTo(oldcxt);
	}
	return rt->sink;
}

/* Close the open sources (they are opened again by the next batch). */
static void
close_sources(StmRuntime *rt)
{
	ListCell   *lc;

	foreach(lc, rt->sources)
	{
		StmSourceRuntime *srt = lfirst(lc);

		stm_source_close(srt->src);
		srt->src = NULL;
	}
}

/* The leader's own share's source goes (with its helpers, or after a failed fetch). */
static void
close_share_source(StmRuntime *rt)
{
	for (int k = 0; k < 2; k++)
	{
		stm_source_close(rt->share_src[k]);
		rt->share_src[k] = NULL;
	}
	rt->share_src_dirty = false;
}

/*
 * With helpers the leader reads a share too (batch.c fetch_by_helpers):
 * of each source k (a join's two) through a source of its own opened as a
 * helper's (it fetches exactly the bounds set_share_bounds gives it),
 * beside the one that plans, whose plan stays the batch's.  They live as
 * long as the helpers, and are opened again after a fetch of one failed
 * part-way, as helpers are replaced then.
 */
StmSource *
stm_runtime_share_source(StmRuntime *rt, StmStreamDef *def, int k)
{
	Assert(k >= 0 && k < lengthof(rt->share_src) && k < list_length(rt->sources));
	if (rt->share_src_dirty)
		close_share_source(rt);
	if (rt->share_src[k] == NULL)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(rt->cxt);
		StmSourceRuntime *srt = list_nth(rt->sources, k);

		/* as a helper's: reads the bounds it is given, for latency when continuous */
		rt->share_src[k] = stm_source_open(srt->def, def->owner, true);
		rt->share_src[k]->low_latency = def->trigger_continuous;
		MemoryContextSwitchTo(oldcxt);
	}
	return rt->share_src[k];
}

/*
 * The CPUs this process may run on: its CPU affinity (taskset, cpusets),
 * lowered by a cgroup v2 CPU quota (cpu.max of its cgroup, as a container
 * limit sets it), at least 1.  Counted once per process.
 */
static int
usable_cpus(void)
{
	static int	cpus = 0;

	if (cpus == 0)
	{
		cpus = 1;
#ifdef CPU_COUNT
		{
			cpu_set_t	set;

			if (sched_getaffinity(0, sizeof(set), &set) == 0)
				cpus = Max(CPU_COUNT(&set), 1);
		}
#else
		cpus = Max((int) sysconf(_SC_NPROCESSORS_ONLN), 1);
#endif
		cpus = Min(cpus, cgroup_cpu_quota());
	}
	return cpus;
}

/*
 * parallel_workers NULL (automatic): streaming.max_parallel_workers_per_stream
 * helpers for a shape they run, in a stream's worker only (a run_batch
 * call's helpers would live for one batch), none for the continuous
 * trigger, none while automatic helpers give way to a stream's worker
 * that found no slot.  At most one helper per CPU (streaming.helper_cpus,
 * or the CPUs the process may run on), and none on one CPU: there they
 * only add their hand-over to the same work (1M records: the fetches of
 * the worker and two helpers 1.78-1.87 CPU s, of the worker alone
 * 1.63-1.67 s).  The worker itself is not counted: with helpers it mostly
 * waits for them and for its commit (its main thread on a CPU 0.8 s of a
 * 2.6-4.5 s batch).
 */
static int
automatic_helpers(StmRuntime *rt, StmStreamDef *def)
{
	TimestampTz until;
	int			cpus;

	if (stm_guc_max_parallel_workers_per_stream == 0 || !rt->parallel_allowed)
		return 0;
	/*
	 * continuous: batches of a few records, read for latency; helpers would
	 * add a hand-over to each, and a plan for helpers asks the brokers for
	 * its bounds where the leader's own consumer knows them (source_kafka.c)
	 */
	if (def->trigger_continuous)
		return 0;
	if (stm_shmem_helpers_yielding(GetCurrentTimestamp(), &until))
	{
		rt->parallel_retry_at = Max(rt->parallel_retry_at, until);
		return 0;
	}
	/* the stored query does not change: ask once per runtime */
	if (rt->parallel_auto_shape == 0)
	{
		int			nest;
		const char *why;
		StmQueryInfo *qi = stm_query_analyze_stored(def, &nest);

		rt->parallel_auto_shape = stm_parallel_query_supported(qi, &why) ? 1 : -1;
		AtEOXact_GUC(true, nest);
	}
	cpus = stm_guc_helper_cpus > 0 ? stm_guc_helper_cpus : usable_cpus();
	if (rt->parallel_auto_shape < 0 || cpus < 2)
		return 0;
	return Min(stm_guc_max_parallel_workers_per_stream, cpus);
}

/*
 * How many helpers the stream's parallel_workers asks for now (none for a
 * run_batch inside a transaction block, whose uncommitted work they would
 * not see, and none for a shape helpers do not run): the helpers are
 * replaced after a batch that failed while they worked, or when the
 * number changed.  Who fetches: a source the helpers read only plans in
 * the leader (plan_only), and one the leader reads fetches ahead.  A
 * source that only planned can be read by the leader at once (its fetch
 * positions the partitions): it is simply no longer plan_only; one that
 * fetched ahead is opened again once helpers read it, as its client
 * would go on fetching what they read.  The helpers themselves start
 * with the first batch that has records (stm_runtime_start_helpers).
 */
void
stm_runtime_prepare_helpers(StmRuntime *rt, StmStreamDef *def)
{
	int			want = def->parallel_workers < 0 ? automatic_helpers(rt, def) : def->parallel_workers;
	const char *why;
	ListCell   *lc;

	if (!rt->parallel_allowed && IsTransactionBlock())
		want = 0;
	if (want > 0)
	{
		/* the first source; a join's other is the query's to check (stm_parallel_query_supported) */
		StmSourceDef *source = rt->sources ?
			((StmSourceRuntime *) linitial(rt->sources))->def :
			stm_catalog_get_source_of_stream(def);

		if (!stm_parallel_source_supported(stm_source_routine(source->kind), &why))
			want = 0;
		foreach(lc, rt->sources)
			if (!stm_parallel_source_supported(stm_source_routine(((StmSourceRuntime *) lfirst(lc))->def->kind), &why))
				want = 0;
	}
	if (rt->parallel &&
		(stm_parallel_dirty(rt->parallel) || rt->parallel_asked != want))
	{
		stm_parallel_stop(rt->parallel);
		rt->parallel = NULL;
	}
	if ((rt->share_src[0] || rt->share_src[1]) && (rt->parallel == NULL || rt->share_src_dirty))
		close_share_source(rt);
	rt->parallel_wanted = want;
	foreach(lc, rt->sources)
	{
		StmSourceRuntime *srt = lfirst(lc);

		if (srt->src == NULL)
			continue;
		if (srt->src->plan_only && want == 0)
			srt->src->plan_only = false;
		else if (!srt->src->plan_only && rt->parallel != NULL)
		{
			close_sources(rt);
			break;
		}
	}
}

/*
 * How many helpers an automatic stream starts for this plan: no more than
 * the sources' parts (a join's two together) can keep busy beside the
 * leader, which reads a share too, so none for a single part.
 */
static int
automatic_count(StmRuntime *rt, int want)
{
	int			parts = 0;
	ListCell   *lc;

	foreach(lc, rt->sources)
	{
		StmSource  *src = ((StmSourceRuntime *) lfirst(lc))->src;

		if (src->routine->share_parts)
			parts += src->routine->share_parts(src);
	}

	return parts < 2 ? 0 : Min(want, parts - 1);
}

/*
 * The helpers, once a plan found records to read.  A stream with a number
 * of its own waits (53000) while no background worker slot is free: its
 * source only plans.  An automatic one runs with the helpers it got, or
 * alone: the leader reads the batch itself, and tries again after
 * STM_HELPER_RETRY_MS.
 */
void
stm_runtime_start_helpers(StmRuntime *rt, StmStreamDef *def)
{
	ListCell   *lc;

	if (rt->parallel_wanted > 0 && rt->parallel == NULL)
	{
		if (def->parallel_workers >= 0)
		{
			rt->parallel = stm_parallel_start(def->id, rt->parallel_wanted, WARNING, rt->cxt);
			if (rt->parallel == NULL)
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
						 errmsg("stream \"%s\" could not start any of its %d parallel helpers",
								def->name, rt->parallel_wanted),
						 errdetail("No background worker slot is free."),
						 errhint("Raise max_worker_processes, or leave the number to the extension: streaming.alter_stream(name, reset => ARRAY['parallel_workers']).")));
		}
		else
		{
			int			n = automatic_count(rt, rt->parallel_wanted);
			TimestampTz now = GetCurrentTimestamp();

			if (n > 0 && now >= rt->parallel_retry_at)
			{
				rt->parallel = stm_parallel_start(def->id, n, LOG, rt->cxt);
				if (rt->parallel == NULL)
				{
					rt->parallel_retry_at = TimestampTzPlusMilliseconds(now, STM_HELPER_RETRY_MS);
					ereport(LOG,
							(errmsg("stream \"%s\" runs without parallel helpers for now",
									def->name),
							 errdetail("No background worker slot is free for its %d automatic helpers.", n)));
				}
			}
		}
		if (rt->parallel)
			rt->parallel_asked = rt->parallel_wanted;
	}
	/* no helpers: the leader reads, and fetches ahead from now on */
	if (rt->parallel == NULL)
		foreach(lc, rt->sources)
			((StmSourceRuntime *) lfirst(lc))->src->plan_only = false;
}

/*
 * Keep what a source's plan said it could not read (its problem), for the
 * stream's source_error and status, until its next plan.
 */
void
stm_runtime_note_plan(StmRuntime *rt, StmSourceRuntime *srt)
{
	if (srt->problem)
		pfree(srt->problem);
	srt->problem = srt->src->problem ? MemoryContextStrdup(rt->cxt, srt->src->problem) : NULL;
	srt->unreadable = srt->src->problem != NULL && srt->src->unreadable;
}

/* What keeps the stream from reading all of its sources, or NULL. */
char *
stm_runtime_source_problem(StmRuntime *rt)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, rt->sources)
	{
		StmSourceRuntime *srt = lfirst(lc);

		if (srt->problem)
			appendStringInfo(&buf, "%s%s", buf.len > 0 ? "; " : "", srt->problem);
	}
	if (buf.len == 0)
	{
		pfree(buf.data);
		return NULL;
	}
	return buf.data;
}

/*
 * The stream's source_error: what keeps it from reading all of its sources
 * and what keeps its sink from taking its rows, or NULL.  One text for
 * both, so that the batch and the worker write the same value.
 */
char *
stm_runtime_source_error(StmRuntime *rt)
{
	char	   *problem = stm_runtime_source_problem(rt);

	if (problem && rt->sink_problem)
		return psprintf("%s; %s", problem, rt->sink_problem);
	if (problem)
		return problem;
	return rt->sink_problem ? pstrdup(rt->sink_problem) : NULL;
}

/* Could the last plans read no part of any source (status 'waiting', SPEC 4)? */
bool
stm_runtime_unreadable(StmRuntime *rt)
{
	ListCell   *lc;

	foreach(lc, rt->sources)
		if (!((StmSourceRuntime *) lfirst(lc))->unreadable)
			return false;
	return rt->sources != NIL;
}

/*
 * After the batch's transaction committed, outside any transaction (a
 * source starts one if it needs one): the sources' and the sink's work
 * that must wait for the commit.  A crash before it only delays it: the
 * source does it again before its next batch.  run_batch, inside the
 * caller's transaction, never gets here: its source catches up before its
 * next batch.
 */
void
stm_runtime_after_commit(StmRuntime *rt)
{
	ListCell   *lc;

	foreach(lc, rt->sources)
	{
		StmSourceRuntime *srt = lfirst(lc);

		if (srt->src && srt->src->routine->after_commit)
			srt->src->routine->after_commit(srt->src, rt->stream_id);
	}
	if (rt->sink && rt->sink->routine->after_commit)
		rt->sink->routine->after_commit(rt->sink);
	/* a stream-stream join's state tables: their dead rows, vacuumed */
	if (rt->ssjoin_ran)
	{
		for (int s = 0; s < 2; s++)
			rt->ssjoin_dead[s] += rt->ssjoin_batch_dead[s];
		rt->ssjoin_ran = false;
		stm_ssjoin_vacuum(rt->stream_id, rt->ssjoin_dead, rt->ssjoin_live);
	}
}

/*
 * The worker, outside any transaction: a sink that delivers after the
 * commit sends what committed batches left (SinkRoutine.deliver); busy:
 * the next batch runs at once.  Nothing to do for a sink that is not open
 * yet or writes in the batch's transaction.
 */
StmSinkStatus
stm_runtime_deliver(StmRuntime *rt, bool busy)
{
	StmSinkStatus none = {0, false, NULL, NULL};

	if (rt->sink == NULL || rt->sink->routine->deliver == NULL)
		return none;
	return rt->sink->routine->deliver(rt->sink, busy);
}

/*
 * The runtime's open sources, in a palloc'd array of *n: its list, and the
 * leader's share (records of its partitions wake the leader, as a helper's
 * do).
 */
static StmSource **
runtime_sources(StmRuntime *rt, int *n)
{
	StmSource **sources = palloc0(sizeof(StmSource *) * (list_length(rt->sources) + 2));
	ListCell   *lc;

	*n = 0;
	foreach(lc, rt->sources)
		sources[(*n)++] = ((StmSourceRuntime *) lfirst(lc))->src;
	for (int k = 0; k < 2; k++)
		if (rt->share_src[k])
			sources[(*n)++] = rt->share_src[k];
	return sources;
}

/*
 * The worker (or a parallel helper) is idle: sleep until one of the
 * runtime's sources may have records, the latch is set, or timeout_ms
 * pass; true when a source says records may have arrived.  It reads the
 * sources' queues outside any transaction: an error there is logged and
 * slept off, and the next plan or share (in a transaction) meets and
 * reports it.
 */
bool
stm_runtime_wait(StmRuntime *rt, long timeout_ms)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool arrived = false;
	int			n;
	StmSource **sources = runtime_sources(rt, &n);

	PG_TRY();
	{
		arrived = stm_source_wait(sources, n, timeout_ms);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		EmitErrorReport();
		FlushErrorState();
		stm_sleep(timeout_ms);
	}
	PG_END_TRY();
	pfree(sources);
	return arrived;
}

/*
 * After a batch: is there nothing for the next one (stm_source_quiet)?
 * False on an error, which the next plan then meets.
 */
bool
stm_runtime_quiet(StmRuntime *rt)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool quiet = false;
	int			n;
	StmSource **sources = runtime_sources(rt, &n);

	PG_TRY();
	{
		quiet = stm_source_quiet(sources, n);
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
	}
	PG_END_TRY();
	pfree(sources);
	return quiet;
}

/*
 * A runtime given up on error (run_batch's): its parallel helpers are told
 * to stop and its segment detached, without waiting for them; the rest
 * goes with the memory context.
 */
void
stm_runtime_abandon(StmRuntime *rt)
{
	stm_parallel_abandon(rt->parallel);
	rt->parallel = NULL;
	rt->share_src[0] = rt->share_src[1] = NULL;
	rt->share_src_dirty = false;
}

/* The end of a runtime: its sources and sink let go of what they hold. */
void
stm_runtime_close(StmRuntime *rt)
{
	stm_parallel_stop(rt->parallel);
	rt->parallel = NULL;
	close_share_source(rt);
	close_sources(rt);
	if (rt->sink && rt->sink->routine->close)
		rt->sink->routine->close(rt->sink);
	rt->sink = NULL;
}

/*
 * The lock that makes one stream run in one place: a worker holds it for its
 * life (session), run_batch for its transaction.  Returns false if taken.
 */
bool
stm_lock_stream(int32 stream_id, bool session)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, STM_ADVISORY_LOCK_CLASS, (uint32) stream_id, 2);
	return LockAcquire(&tag, ExclusiveLock, session, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Wait for the stream's lock (held by a run_batch in another transaction). */
void
stm_wait_stream_lock(int32 stream_id)
{
	LOCKTAG		tag;

	SET_LOCKTAG_ADVISORY(tag, MyDatabaseId, STM_ADVISORY_LOCK_CLASS, (uint32) stream_id, 2);
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
}
