/*
 * aggstate.c: state of aggregate streams (SPEC 3, 3.2).
 *
 * A batch aggregates its rows in memory first: one hash entry per window
 * and group, holding the aggregates' transition states.  At the end of the
 * batch each entry is merged, once, into the stream's state table
 * (streaming.state_<id>) with the aggregates' combine functions, and the
 * sink is brought up to date: in update mode the changed groups are upserted
 * into it, in complete mode it is rewritten from the whole state.  Windows
 * are merged set-based (a statement per chunk of groups to read, one to
 * write: merge_window_groups); sessions a group at a time, since a batch's
 * session may absorb stored ones.
 *
 * Groups are told apart as GROUP BY does, by the types' equality and hash
 * functions (numeric 1.0 and 1.00 are one group, NULL is a group like any
 * other): in memory with PostgreSQL's TupleHashTable, in the state table by
 * group_hash (the types' 64-bit hashes, stable across restarts) and IS NOT
 * DISTINCT FROM on the window start and group columns.  A state row's
 * primary key, group_key, is the binary form of the values that created it.
 *
 * Memory (SPEC 7): a group in memory is its key (the hash table's tuple),
 * its aggregates' states and, for session windows, its sessions; all of it
 * lives in one context, and the batch's merges run in a context of their
 * own, reset after each group.  When the groups exceed their share of
 * streaming.batch_memory (guc.h), they are merged into the state table
 * part-way, as at the end of the batch, and the batch goes on with none in
 * memory (as a hash aggregate spills).  Everything stays in the batch's
 * transaction.  A group merged in two parts of a batch combines its states
 * twice, with the same result; in update mode its sink row is then upserted
 * twice, ending at the batch's value (the table sink keeps the last and
 * writes it once), and counts twice in num_output_rows (rows written); its
 * late rows count once per part.
 */
#include "postgres.h"

#include "access/tupdesc.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "catalog/pg_type.h"
#include "common/hashfn.h"
#include "executor/executor.h"
#include "utils/fmgrprotos.h"
#include "utils/typcache.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "nodes/nodeFuncs.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/timestamp.h"
#include "utils/guc.h"
#include "utils/tuplestore.h"
#include "utils/array.h"

#include "aggstate.h"
#include "catalog.h"
#include "guc.h"
#include "session.h"
#include "sql.h"
#include "statetable.h"
#include "interrupts.h"

struct StmAggBatch
{
	StmAggQuery *agg;
	int32		stream_id;
	bool		complete;		/* complete mode, else update */
	bool		append;			/* append mode */
	bool		has_watermark;	/* windows close: late rows, eviction */
	int			event_time_att; /* the source row's event-time column, or -1 */
	int			time_key;		/* no window: the group column that is the event time, or -1 */
	bool		closes;			/* groups have a closing time (window end, or time_key) */
	TimestampTz watermark;		/* the one this batch filters and evicts with */
	bool		drops_late;		/* rows of closed windows are late (not a join's rows) */
	StmLateRows *keep_late;		/* late_rows => 'keep', else NULL */
	bool		update;			/* update mode: changed groups are upserted */
	StmSinkBatch *sink;
	char	   *table;
	StmAggRuntime *rt;
	MemoryContext cxt;			/* what the groups take in memory (the hash tables' buckets here) */
	MemoryContext group_cxt;	/* below cxt: keys, states and sessions; reset by each merge */
	MemoryContext merge_cxt;	/* below cxt: merging one group, reset after each */
	MemoryContext hash_cxt;		/* hashing and comparing keys, reset per lookup */
	Size		mem_limit;		/* cxt's share of streaming.batch_memory */
	TupleHashTable groups;		/* (window start, group values) -> states, or SessionGroup */
	TupleHashTable late;		/* the closed windows and groups that rows came for */
	int64		nlate;
	int64		ngroups;		/* groups merged into the state table so far */
	int64		rows_added;		/* state rows inserted less deleted */
	int			nmerges;		/* merges of the groups in memory so far */
	TupleTableSlot *key_slot;	/* the hash tables' key: window start, group values */
	TupleTableSlot *entry_slot; /* a hash entry's key, read back */
	ExprState **keys;
	FmgrInfo   *key_send;
	FmgrInfo   *key_hash;		/* 64-bit hash functions, for group_hash; fn_oid 0: none */
	Oid		   *key_collations;
	FmgrInfo   *key_eq;			/* the key types' equality, as GROUP BY's */
	ExprState **outputs;
	TupleTableSlot *group_slot;
	ExprContext *out_econtext;
	StmAggForwardFn forward;	/* a parallel helper: partial groups go here, not to the state */
	void	   *forward_arg;
	TupleDesc	partial_desc;	/* a partial group: window start, group values, stored states */
};

/*
 * A hash entry's data: a window and group's aggregate states (an array of
 * StmAggValue), or for session windows a group's sessions (the key then
 * leaves the window out).  The key itself is the entry's tuple.
 */
typedef struct SessionGroup
{
	StmSessionList sessions;	/* the batch's sessions */
	StmSessionList late;		/* the closed sessions rows came for */
} SessionGroup;

char *
stm_aggstate_table(int32 stream_id)
{
	return psprintf("streaming.%s", quote_identifier(psprintf("state_%d", stream_id)));
}

/*
 * The type of group column k (0-based) in the state table, qualified: a
 * domain's base type, since its checks would run as the extension's owner.
 */
char *
stm_aggstate_key_type(StmAggQuery *agg, int k)
{
	int32		typmod = agg->key_typmods[k];
	Oid			base = getBaseTypeAndTypmod(agg->key_types[k], &typmod);

	return format_type_extended(base, typmod, FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
}

/* The type aggregate agg's state is kept as, qualified (bytea for internal). */
char *
stm_aggstate_state_type(Aggref *agg)
{
	return format_type_extended(stm_agg_storedtype(agg), -1, FORMAT_TYPE_FORCE_QUALIFY);
}

/*
 * A group's columns of the state table, in their order: "window_start,
 * window_end, key_1, ..., state_1, ..." (what another server reads of it,
 * and what export_share moves: SPEC 8).
 */
char *
stm_aggstate_group_columns(StmAggQuery *agg)
{
	StringInfoData cols;

	initStringInfo(&cols);
	appendStringInfoString(&cols, "window_start, window_end");
	for (int k = 0; k < agg->nkeys; k++)
		appendStringInfo(&cols, ", key_%d", k + 1);
	for (int i = 0; i < list_length(agg->aggrefs); i++)
		appendStringInfo(&cols, ", state_%d", i + 1);
	return cols.data;
}

/* The state table: a row per window and group, a column per aggregate state. */
void
stm_aggstate_create(int32 stream_id, StmAggQuery *agg, Oid owner)
{
	StringInfoData cols;
	ListCell   *lc;
	int			n = 0;

	initStringInfo(&cols);
	appendStringInfoString(&cols, "group_key bytea PRIMARY KEY, window_start timestamptz, window_end timestamptz");
	for (int k = 0; k < agg->nkeys; k++)
		appendStringInfo(&cols, ", key_%d %s", k + 1, stm_aggstate_key_type(agg, k));
	foreach(lc, agg->aggrefs)
		appendStringInfo(&cols, ", state_%d %s", ++n, stm_aggstate_state_type(lfirst(lc)));
	/* session windows: the hash of the group alone, to find a group's sessions */
	appendStringInfoString(&cols, ", group_hash bigint");
	stm_statetable_create(psprintf("state_%d", stream_id), cols.data, "window_end",
						  agg->window.kind == STM_WINDOW_SESSION ? "group_hash, window_end" : "group_hash",
						  owner);
}

/*
 * The batch's groups and its late groups, keyed by (window start, group
 * values) with the types' equality and hash functions, as GROUP BY.
 */
static void
build_hash_tables(StmAggBatch *ab)
{
	StmAggQuery *agg = ab->agg;
	int			ncols = 1 + agg->nkeys;
	TupleDesc	desc = CreateTemplateTupleDesc(ncols);
	AttrNumber *cols = palloc(sizeof(AttrNumber) * ncols);
	Oid		   *eqops = palloc(sizeof(Oid) * ncols);
	Oid		   *collations = palloc(sizeof(Oid) * ncols);
	Oid		   *eqfuncs;
	FmgrInfo   *hashfuncs;

	TupleDescInitEntry(desc, 1, "window_start", TIMESTAMPTZOID, -1, 0);
	for (int k = 0; k < agg->nkeys; k++)
		TupleDescInitEntry(desc, 2 + k, NULL, agg->key_types[k], agg->key_typmods[k], 0);
	/* stm_query_analyze made sure the key types hash */
	for (int c = 0; c < ncols; c++)
	{
		cols[c] = c + 1;
		eqops[c] = lookup_type_cache(TupleDescAttr(desc, c)->atttypid, TYPECACHE_EQ_OPR)->eq_opr;
		collations[c] = c == 0 ? InvalidOid : TupleDescAttr(agg->group_desc, 1 + c)->attcollation;
	}
	execTuplesHashPrepare(ncols, eqops, &eqfuncs, &hashfuncs);
	/* stored groups are matched in C with the same functions (key_matches) */
	ab->key_eq = palloc(sizeof(FmgrInfo) * Max(agg->nkeys, 1));
	for (int k = 0; k < agg->nkeys; k++)
		fmgr_info(eqfuncs[1 + k], &ab->key_eq[k]);
	ab->groups = BuildTupleHashTableExt(NULL, desc, ncols, cols, eqfuncs, hashfuncs, collations,
										1024, 0, ab->cxt, ab->group_cxt, ab->hash_cxt, false);
	ab->late = BuildTupleHashTableExt(NULL, desc, ncols, cols, eqfuncs, hashfuncs, collations,
									  64, 0, ab->cxt, ab->group_cxt, ab->hash_cxt, false);
	ab->key_slot = MakeSingleTupleTableSlot(desc, &TTSOpsVirtual);
	ab->entry_slot = MakeSingleTupleTableSlot(desc, &TTSOpsMinimalTuple);
}

StmAggBatch *
stm_aggbatch_begin(StmAggQuery *agg, int32 stream_id, StmOutputMode output_mode,
				   StmSinkBatch *sink, bool has_watermark, TimestampTz watermark,
				   int event_time_att, StmLateRows *keep_late)
{
	StmAggBatch *ab = palloc0(sizeof(StmAggBatch));
	ListCell   *lc;
	int			n = 0;

	ab->agg = agg;
	ab->keep_late = keep_late;
	ab->stream_id = stream_id;
	/* one group and no key: the single result row is rewritten, as in complete mode */
	ab->complete = output_mode == STM_OUTPUT_COMPLETE ||
		(agg->nkeys == 0 && agg->window.kind == STM_WINDOW_NONE);
	ab->append = output_mode == STM_OUTPUT_APPEND;
	/*
	 * Without a window, groups close when the watermark passes their event
	 * time, if the event-time column is one of them (as in Spark).
	 */
	ab->event_time_att = agg->event_time_att >= 0 ? agg->event_time_att : event_time_att;
	ab->time_key = stm_agg_time_key(agg, event_time_att + 1);
	ab->closes = agg->window.kind != STM_WINDOW_NONE || ab->time_key >= 0;
	/* complete mode drops and evicts nothing (SPEC 3.1) */
	ab->has_watermark = has_watermark && !ab->complete && ab->closes;
	ab->watermark = watermark;
	ab->drops_late = true;
	ab->update = !ab->complete && !ab->append;
	ab->sink = sink;
	ab->table = stm_aggstate_table(stream_id);

	/*
	 * The groups' memory is counted as nodeAgg.c counts a hash aggregate's:
	 * every block of cxt and its children; blocks of at most 1/16 of the
	 * limit keep the count close to what is used.
	 */
	ab->mem_limit = stm_guc_groups_memory();
	ab->cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming groups",
									ALLOCSET_DEFAULT_SIZES);
	ab->group_cxt = AllocSetContextCreate(ab->cxt, "streaming group states",
										  ALLOCSET_DEFAULT_MINSIZE, ALLOCSET_DEFAULT_INITSIZE,
										  Max(ALLOCSET_DEFAULT_INITSIZE,
											  Min(ALLOCSET_DEFAULT_MAXSIZE, ab->mem_limit / 16)));
	ab->merge_cxt = AllocSetContextCreate(ab->cxt, "streaming group merge",
										  ALLOCSET_DEFAULT_SIZES);
	ab->hash_cxt = AllocSetContextCreate(ab->cxt, "streaming group keys",
										 ALLOCSET_SMALL_SIZES);
	ab->rt = stm_agg_init(agg->aggrefs, ab->group_cxt);
	build_hash_tables(ab);

	ab->keys = palloc(sizeof(ExprState *) * Max(agg->nkeys, 1));
	ab->key_send = palloc(sizeof(FmgrInfo) * Max(agg->nkeys, 1));
	ab->key_hash = palloc0(sizeof(FmgrInfo) * Max(agg->nkeys, 1));
	ab->key_collations = palloc(sizeof(Oid) * Max(agg->nkeys, 1));
	foreach(lc, agg->key_exprs)
	{
		Oid			sendfn;
		bool		varlena;
		TypeCacheEntry *tc = lookup_type_cache(agg->key_types[n], TYPECACHE_HASH_EXTENDED_PROC);

		ab->keys[n] = ExecInitExpr(lfirst(lc), NULL);
		getTypeBinaryOutputInfo(agg->key_types[n], &sendfn, &varlena);
		fmgr_info(sendfn, &ab->key_send[n]);
		if (OidIsValid(tc->hash_extended_proc))
			fmgr_info(tc->hash_extended_proc, &ab->key_hash[n]);
		ab->key_collations[n] = TupleDescAttr(agg->group_desc, 2 + n)->attcollation;
		n++;
	}
	ab->outputs = palloc(sizeof(ExprState *) * list_length(agg->outputs));
	n = 0;
	foreach(lc, agg->outputs)
		ab->outputs[n++] = ExecInitExpr(lfirst(lc), NULL);
	ab->group_slot = MakeSingleTupleTableSlot(agg->group_desc, &TTSOpsVirtual);
	ab->out_econtext = CreateStandaloneExprContext();
	return ab;
}

/* A new state row's group_key: the window start, then the group values (statetable.c) */
static bytea *
group_key(StmAggBatch *ab, bool has_window, TimestampTz wstart, Datum *vals, bool *nulls)
{
	StringInfoData buf;

	stm_key_init(&buf);
	if (has_window)
		appendBinaryStringInfo(&buf, (char *) &wstart, sizeof(wstart));
	for (int k = 0; k < ab->agg->nkeys; k++)
		stm_key_append(&buf, &ab->key_send[k], vals[k], nulls[k]);
	return stm_key_finish(&buf);
}

/*
 * group_hash: the window start's and the group values' 64-bit hashes
 * (seed 0), equal for equal values in any session.
 */
static int64
group_hash(StmAggBatch *ab, bool has_window, TimestampTz wstart, Datum *vals, bool *nulls)
{
	uint64		h = 0;

	if (has_window)
		h = DatumGetUInt64(DirectFunctionCall2(hashint8extended, Int64GetDatum(wstart),
											   UInt64GetDatum(0)));
	for (int k = 0; k < ab->agg->nkeys; k++)
	{
		uint64		kh = 0;

		if (!nulls[k] && OidIsValid(ab->key_hash[k].fn_oid))
			kh = DatumGetUInt64(FunctionCall2Coll(&ab->key_hash[k], ab->key_collations[k],
												  vals[k], UInt64GetDatum(0)));
		h = hash_combine64(h, kh);
	}
	return (int64) h;
}

/* The entry of (window start, group values) in one of the batch's hash tables. */
static TupleHashEntry
lookup(StmAggBatch *ab, TupleHashTable table, bool has_window, TimestampTz wstart,
	   Datum *vals, bool *nulls, bool *isnew)
{
	TupleTableSlot *slot = ab->key_slot;
	TupleHashEntry entry;

	ExecClearTuple(slot);
	slot->tts_values[0] = TimestampTzGetDatum(wstart);
	slot->tts_isnull[0] = !has_window;
	for (int k = 0; k < ab->agg->nkeys; k++)
	{
		slot->tts_values[1 + k] = vals[k];
		slot->tts_isnull[1 + k] = nulls[k];
	}
	ExecStoreVirtualTuple(slot);
	entry = LookupTupleHashEntry(table, slot, isnew, NULL);
	MemoryContextReset(ab->hash_cxt);
	return entry;
}

/*
 * A hash entry's key, read back from its tuple: whether it has a window,
 * its start in *wstart, and the group values from column 2 of
 * ab->entry_slot on (valid until the next entry).
 */
static bool
entry_key(StmAggBatch *ab, TupleHashEntry entry, TimestampTz *wstart)
{
	TupleTableSlot *slot = ab->entry_slot;

	ExecStoreMinimalTuple(entry->firstTuple, slot, false);
	slot_getallattrs(slot);
	*wstart = DatumGetTimestampTz(slot->tts_values[0]);
	return !slot->tts_isnull[0];
}

/* When a window and group closes: its window's end, or its time_key's value. */
static TimestampTz
group_end(StmAggBatch *ab, bool has_window, TimestampTz wstart, Datum *vals, bool *nulls)
{
	if (has_window)
		return wstart + ab->agg->window.size_us;
	if (ab->time_key >= 0 && !nulls[ab->time_key])
		return DatumGetTimestampTz(vals[ab->time_key]);
	return DT_NOEND;
}

/* A row into the window starting at wstart of its group; false when the window is closed. */
static bool
add_to_group(StmAggBatch *ab, ExprContext *econtext, bool has_window,
			 TimestampTz wstart, Datum *vals, bool *nulls)
{
	bool		isnew;
	TupleHashEntry entry;

	/* a row counts in a window only while the window is open (SPEC 3.1) */
	if (ab->has_watermark && ab->drops_late &&
		group_end(ab, has_window, wstart, vals, nulls) <= ab->watermark)
	{
		(void) lookup(ab, ab->late, has_window, wstart, vals, nulls, &isnew);
		if (isnew)
			ab->nlate++;
		return false;
	}
	/* a new entry's tuple holds copies of the values; its states come next to it */
	entry = lookup(ab, ab->groups, has_window, wstart, vals, nulls, &isnew);
	if (isnew)
	{
		entry->additional = MemoryContextAlloc(ab->group_cxt,
											   sizeof(StmAggValue) * Max(ab->rt->naggs, 1));
		stm_agg_group_init(ab->rt, entry->additional);
	}
	stm_agg_advance(ab->rt, entry->additional, econtext);
	return true;
}

/*
 * A row into the sessions of its group: [ts, ts + gap) joins the sessions
 * it overlaps or touches.  A row is late when ts + gap <= watermark (SPEC
 * 3.1); late rows form sessions too, only to be counted.
 */
static bool
add_to_session(StmAggBatch *ab, ExprContext *econtext, TimestampTz ts,
			   Datum *vals, bool *nulls)
{
	bool		isnew;
	TupleHashEntry entry = lookup(ab, ab->groups, false, 0, vals, nulls, &isnew);
	SessionGroup *group;
	TimestampTz end = ts + ab->agg->window.size_us;
	StmSession *s;
	MemoryContext old;

	if (isnew)
		entry->additional = MemoryContextAllocZero(ab->group_cxt, sizeof(SessionGroup));
	group = entry->additional;
	old = MemoryContextSwitchTo(ab->group_cxt);
	if (ab->has_watermark && ab->drops_late && end <= ab->watermark)
	{
		(void) stm_session_add_row(&group->late, ts, end, NULL);
		MemoryContextSwitchTo(old);
		return false;
	}
	s = stm_session_add_row(&group->sessions, ts, end, ab->rt);
	MemoryContextSwitchTo(old);
	stm_agg_advance(ab->rt, s->vals, econtext);
	return true;
}

static void merge_groups(StmAggBatch *ab);
static void forward_groups(StmAggBatch *ab);

/* One source row (the econtext's scan tuple, past WHERE) into its groups. */
void
stm_aggbatch_add(StmAggBatch *ab, ExprContext *econtext)
{
	StmAggQuery *agg = ab->agg;
	Datum		vals[FUNC_MAX_ARGS];
	bool		nulls[FUNC_MAX_ARGS];
	StmWindowSpec *w = &agg->window;
	TimestampTz ts;
	int64		offset;
	TimestampTz start;
	bool		counted;

	for (int k = 0; k < agg->nkeys; k++)
		vals[k] = ExecEvalExprSwitchContext(ab->keys[k], econtext, &nulls[k]);

	if (w->kind == STM_WINDOW_NONE)
		counted = add_to_group(ab, econtext, false, 0, vals, nulls);
	else
	{
		/* the event time is a source column, never NULL here (a bad record) */
		ts = DatumGetTimestampTz(econtext->ecxt_scantuple->tts_values[agg->event_time_att]);
		if (w->kind == STM_WINDOW_TUMBLE)
		{
			offset = (ts - w->origin) % w->size_us;
			if (offset < 0)
				offset += w->size_us;
			counted = add_to_group(ab, econtext, true, ts - offset, vals, nulls);
		}
		else if (w->kind == STM_WINDOW_HOP)
		{
			/* every window [start, start + size) with start on the slide grid */
			offset = (ts - w->origin) % w->slide_us;
			if (offset < 0)
				offset += w->slide_us;
			counted = true;
			for (start = ts - offset; start + w->size_us > ts; start -= w->slide_us)
				counted &= add_to_group(ab, econtext, true, start, vals, nulls);
		}
		else
			counted = add_to_session(ab, econtext, ts, vals, nulls);
	}
	/* a row dropped from one of its windows at least is kept once */
	if (!counted && ab->keep_late)
		stm_late_row_keep(ab->keep_late, econtext->ecxt_scantuple->tts_values,
						  econtext->ecxt_scantuple->tts_isnull,
						  ab->event_time_att);

	/* more than their share of batch_memory: into the state table (SPEC 7) */
	if (MemoryContextMemAllocated(ab->cxt, true) > ab->mem_limit)
	{
		ereport(stm_guc_log_batches ? LOG : DEBUG1,
				(errmsg("the batch's groups take more than half of streaming.batch_memory (%zu kB): merging them into %s part-way",
						ab->mem_limit / 1024, ab->table)));
		if (ab->forward)
			forward_groups(ab);
		else
			merge_groups(ab);
	}
}

/*
 * The rows of a join of two sources are never late for the aggregate over
 * it (ssjoin.c drops the late input rows, and a row of a window the
 * watermark closed cannot come from it): none is dropped as late, and
 * windows close as the watermark says.
 */
void
stm_aggbatch_no_late_rows(StmAggBatch *ab)
{
	ab->drops_late = false;
}

/*
 * Parallel helpers (parallel.c) pre-aggregate: a helper's batch hands its
 * groups, their states as the state table stores them (serialized when
 * internal), to fn at its end and whenever they exceed their memory,
 * instead of merging them; the leader combines them into its own groups
 * (stm_aggbatch_add_partial), as a Finalize Agg combines a Partial Agg's.
 * A partial group is a row of stm_aggbatch_partial_desc: the window start
 * (NULL: no window), the group values, the states.
 */
void
stm_aggbatch_forward(StmAggBatch *ab, StmAggForwardFn fn, void *arg)
{
	ab->forward = fn;
	ab->forward_arg = arg;
}

TupleDesc
stm_aggbatch_partial_desc(StmAggBatch *ab)
{
	StmAggQuery *agg = ab->agg;

	if (ab->partial_desc == NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(ab->cxt);
		TupleDesc	desc = CreateTemplateTupleDesc(1 + agg->nkeys + ab->rt->naggs);

		TupleDescInitEntry(desc, 1, "window_start", TIMESTAMPTZOID, -1, 0);
		for (int k = 0; k < agg->nkeys; k++)
			TupleDescInitEntry(desc, 2 + k, NULL, agg->key_types[k], agg->key_typmods[k], 0);
		for (int i = 0; i < ab->rt->naggs; i++)
			TupleDescInitEntry(desc, 2 + agg->nkeys + i, NULL, ab->rt->fns[i].storedtype, -1, 0);
		ab->partial_desc = desc;
		MemoryContextSwitchTo(old);
	}
	return ab->partial_desc;
}

/* A helper's groups to its leader; then none in memory, as after a merge. */
static void
forward_groups(StmAggBatch *ab)
{
	int			nkeys = ab->agg->nkeys;
	int			n = 1 + nkeys + ab->rt->naggs;
	Datum	   *values = palloc(sizeof(Datum) * n);
	bool	   *nulls = palloc(sizeof(bool) * n);
	tuplehash_iterator iter;
	TupleHashEntry entry;
	MemoryContext states_cxt;

	(void) stm_aggbatch_partial_desc(ab);
	states_cxt = stm_agg_set_state_context(ab->rt, ab->merge_cxt);
	InitTupleHashIterator(ab->groups, &iter);
	while ((entry = ScanTupleHashTable(ab->groups, &iter)) != NULL)
	{
		MemoryContext old = MemoryContextSwitchTo(ab->merge_cxt);
		StmAggValue *vals = entry->additional;
		TimestampTz wstart;
		bool		has_window = entry_key(ab, entry, &wstart);

		stm_check_for_interrupts();
		values[0] = TimestampTzGetDatum(wstart);
		nulls[0] = !has_window;
		for (int k = 0; k < nkeys; k++)
		{
			values[1 + k] = ab->entry_slot->tts_values[1 + k];
			nulls[1 + k] = ab->entry_slot->tts_isnull[1 + k];
		}
		for (int i = 0; i < ab->rt->naggs; i++)
			values[1 + nkeys + i] = stm_agg_store(ab->rt, i, &vals[i], &nulls[1 + nkeys + i]);
		ab->forward(ab->forward_arg, ab->partial_desc, values, nulls);
		MemoryContextSwitchTo(old);
		MemoryContextReset(ab->merge_cxt);
	}
	TermTupleHashIterator(&iter);
	(void) stm_agg_set_state_context(ab->rt, states_cxt);
	ExecClearTuple(ab->entry_slot);
	ResetTupleHashTable(ab->groups);
	ResetTupleHashTable(ab->late);
	MemoryContextReset(ab->group_cxt);
	ab->nmerges++;
	pfree(values);
	pfree(nulls);
}

/*
 * The leader: a helper's partial group (a row of stm_aggbatch_partial_desc)
 * combined into the batch's group; the helper filtered its late rows with
 * the same watermark.
 */
void
stm_aggbatch_add_partial(StmAggBatch *ab, Datum *values, bool *nulls)
{
	int			nkeys = ab->agg->nkeys;
	bool		isnew;
	TupleHashEntry entry = lookup(ab, ab->groups, !nulls[0], DatumGetTimestampTz(values[0]),
								  values + 1, nulls + 1, &isnew);
	StmAggValue *vals;

	if (isnew)
	{
		entry->additional = MemoryContextAlloc(ab->group_cxt,
											   sizeof(StmAggValue) * Max(ab->rt->naggs, 1));
		stm_agg_group_init(ab->rt, entry->additional);
	}
	vals = entry->additional;
	for (int i = 0; i < ab->rt->naggs; i++)
	{
		StmAggValue from;

		stm_agg_load(ab->rt, i, values[1 + nkeys + i], nulls[1 + nkeys + i], &from);
		stm_agg_combine(ab->rt, i, &vals[i], &from);
	}
	if (MemoryContextMemAllocated(ab->cxt, true) > ab->mem_limit)
	{
		ereport(stm_guc_log_batches ? LOG : DEBUG1,
				(errmsg("the batch's groups take more than half of streaming.batch_memory (%zu kB): merging them into %s part-way",
						ab->mem_limit / 1024, ab->table)));
		merge_groups(ab);
	}
}

/* A helper's batch: its last groups to the leader, and its late groups' count. */
void
stm_aggbatch_finish_forward(StmAggBatch *ab, int64 *num_late_rows)
{
	forward_groups(ab);
	*num_late_rows = ab->nlate;
	stm_agg_end(ab->rt);
	MemoryContextDelete(ab->cxt);
	FreeExprContext(ab->out_econtext, true);
}

/* The sink row of a group, from its merged states. */
static void
output_row(StmAggBatch *ab, bool has_window, TimestampTz wstart, TimestampTz wend,
		   Datum *keyvals, bool *keynulls, StmAggValue *states,
		   Datum *out, bool *outnulls)
{
	StmAggQuery *agg = ab->agg;
	TupleTableSlot *slot = ab->group_slot;
	int			n = 0;

	ExecClearTuple(slot);
	slot->tts_values[0] = TimestampTzGetDatum(wstart);
	slot->tts_isnull[0] = !has_window;
	slot->tts_values[1] = TimestampTzGetDatum(wend);
	slot->tts_isnull[1] = !has_window;
	for (int k = 0; k < agg->nkeys; k++)
	{
		slot->tts_values[2 + k] = keyvals[k];
		slot->tts_isnull[2 + k] = keynulls[k];
	}
	for (int i = 0; i < ab->rt->naggs; i++)
		slot->tts_values[2 + agg->nkeys + i] =
			stm_agg_finalize(ab->rt, i, &states[i], &slot->tts_isnull[2 + agg->nkeys + i]);
	ExecStoreVirtualTuple(slot);
	ab->out_econtext->ecxt_scantuple = slot;
	for (n = 0; n < list_length(agg->outputs); n++)
		out[n] = ExecEvalExpr(ab->outputs[n], ab->out_econtext, &outnulls[n]);
}

/*
 * SPI_execute_plan, read-write, leaving CurrentMemoryContext where it was
 * (SPI leaves it at its procedure context, which lives until SPI_finish:
 * a group's allocations after a query would pile up there).
 */
static int
execute_plan(SPIPlanPtr plan, Datum *args, const char *nulls, long tcount)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			rc = SPI_execute_plan(plan, args, nulls, false, tcount);

	MemoryContextSwitchTo(cxt);
	return rc;
}

/*
 * execute_plan on the state table: as the extension's owner (statetable.c),
 * the statement holding only built-in operators on built-in types.
 */
static int
execute_state_plan(SPIPlanPtr plan, Datum *args, const char *nulls, long tcount)
{
	StmStateAccess access = stm_statetable_begin();
	int			rc = execute_plan(plan, args, nulls, tcount);

	stm_statetable_end(access);
	return rc;
}

/*
 * Do a stored row's group values (from column first of tup) equal the
 * group's?  With the types' equality, as GROUP BY tells groups apart, and
 * NULL equal to NULL; called as the stream's owner, as every user function.
 */
static bool
key_matches(StmAggBatch *ab, HeapTuple tup, TupleDesc desc, int first,
			Datum *keyvals, bool *keynulls)
{
	for (int k = 0; k < ab->agg->nkeys; k++)
	{
		bool		isnull;
		Datum		d = SPI_getbinval(tup, desc, first + k, &isnull);

		if (isnull != keynulls[k])
			return false;
		if (!isnull && !DatumGetBool(FunctionCall2Coll(&ab->key_eq[k], ab->key_collations[k],
													   d, keyvals[k])))
			return false;
	}
	return true;
}

/* The SPI plans of the end of a batch (session windows), and room for rows. */
typedef struct StatePlans
{
	SPIPlanPtr	upsert;			/* session windows: a session's new state row */
	SPIPlanPtr	sessions;		/* session windows: a group's stored sessions in a range */
	SPIPlanPtr	delete;			/* session windows: a merged-away session's state row */
	int			nstate;			/* columns of the state table */
	Datum	   *vals;			/* room for a state row */
	bool	   *isnull;
	char	   *nulls;
	Datum	   *out;			/* room for a sink row */
	bool	   *outnulls;
} StatePlans;

/* Room for a state row and a sink row. */
static void
alloc_rows(StmAggBatch *ab, StatePlans *p)
{
	int			nout = list_length(ab->agg->outputs);

	p->nstate = 4 + ab->agg->nkeys + ab->rt->naggs;
	p->vals = palloc(sizeof(Datum) * p->nstate);
	p->isnull = palloc(sizeof(bool) * p->nstate);
	p->nulls = palloc(p->nstate);
	p->out = palloc(sizeof(Datum) * Max(nout, 1));
	p->outnulls = palloc(sizeof(bool) * Max(nout, 1));
}

/*
 * Session windows: a group's sessions are read and written a statement at
 * a time (a batch's session can absorb several stored ones).
 */
static void
prepare_state_plans(StmAggBatch *ab, StatePlans *p)
{
	StmAggQuery *agg = ab->agg;
	StmAggRuntime *rt = ab->rt;
	int			nkeys = agg->nkeys;
	Oid		   *types;
	Oid			argtypes[3];
	StringInfoData states;
	StringInfoData sql;

	alloc_rows(ab, p);
	types = palloc(sizeof(Oid) * p->nstate);

	/*
	 * Stored groups are found by their hash; their group values are compared
	 * in C (key_matches), so that the statements, which run as the
	 * extension's owner, call no user code (a type's equality may be).
	 */
	initStringInfo(&states);
	for (int k = 0; k < nkeys; k++)
		appendStringInfo(&states, ", key_%d", k + 1);
	for (int i = 0; i < rt->naggs; i++)
		appendStringInfo(&states, ", state_%d", i + 1);
	initStringInfo(&sql);

	/* window_end moves when a session grows */
	appendStringInfo(&sql, "INSERT INTO %s VALUES (", ab->table);
	for (int c = 0; c < p->nstate; c++)
		appendStringInfo(&sql, "%s$%d", c ? ", " : "", c + 1);
	appendStringInfoString(&sql, ") ON CONFLICT (group_key) DO UPDATE SET window_end = EXCLUDED.window_end");
	for (int i = 0; i < rt->naggs; i++)
		appendStringInfo(&sql, ", state_%d = EXCLUDED.state_%d", i + 1, i + 1);
	types[0] = BYTEAOID;
	types[1] = types[2] = TIMESTAMPTZOID;
	for (int k = 0; k < nkeys; k++)
		types[3 + k] = agg->key_types[k];
	for (int i = 0; i < rt->naggs; i++)
		types[3 + nkeys + i] = rt->fns[i].storedtype;
	types[p->nstate - 1] = INT8OID;
	p->upsert = SPI_prepare(sql.data, p->nstate, types);

	/* the group's stored sessions that reach [lo, hi]: they end at or after lo and start at or before hi */
	resetStringInfo(&sql);
	appendStringInfo(&sql, "SELECT group_key, window_start, window_end%s FROM %s "
					 "WHERE group_hash = $1 AND window_end >= $2 AND window_start <= $3 FOR UPDATE",
					 states.data, ab->table);
	argtypes[0] = INT8OID;
	argtypes[1] = argtypes[2] = TIMESTAMPTZOID;
	p->sessions = SPI_prepare(sql.data, 3, argtypes);
	argtypes[0] = BYTEAOID;
	p->delete = SPI_prepare(psprintf("DELETE FROM %s WHERE group_key = $1", ab->table),
							1, argtypes);
	if (p->upsert == NULL || p->sessions == NULL || p->delete == NULL)
		elog(ERROR, "could not prepare the session queries of stream %d", ab->stream_id);
}

/* A state row (p->vals, p->isnull): the group's key, window, group values and states. */
static void
state_row(StmAggBatch *ab, StatePlans *p, bytea *key, bool has_window,
		  TimestampTz wstart, TimestampTz wend, Datum *keyvals, bool *keynulls,
		  StmAggValue *states, int64 hash)
{
	int			nkeys = ab->agg->nkeys;

	p->vals[0] = PointerGetDatum(key);
	p->isnull[0] = false;
	p->vals[1] = TimestampTzGetDatum(wstart);
	p->isnull[1] = !has_window;
	p->vals[2] = TimestampTzGetDatum(wend);
	p->isnull[2] = !ab->closes;
	for (int k = 0; k < nkeys; k++)
	{
		p->vals[3 + k] = keyvals[k];
		p->isnull[3 + k] = keynulls[k];
	}
	for (int i = 0; i < ab->rt->naggs; i++)
		p->vals[3 + nkeys + i] = stm_agg_store(ab->rt, i, &states[i], &p->isnull[3 + nkeys + i]);
	p->vals[p->nstate - 1] = Int64GetDatum(hash);
	p->isnull[p->nstate - 1] = false;
}

/* Session windows: one state row, written now. */
static void
write_state(StmAggBatch *ab, StatePlans *p, bytea *key, bool has_window,
			TimestampTz wstart, TimestampTz wend, Datum *keyvals, bool *keynulls,
			StmAggValue *states, int64 hash)
{
	state_row(ab, p, key, has_window, wstart, wend, keyvals, keynulls, states, hash);
	for (int c = 0; c < p->nstate; c++)
		p->nulls[c] = p->isnull[c] ? 'n' : ' ';
	if (execute_state_plan(p->upsert, p->vals, p->nulls, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write the state table of stream %d", ab->stream_id);
}

/* Update mode: the group's row in the sink. */
static void
upsert_sink(StmAggBatch *ab, StatePlans *p, bool has_window, TimestampTz wstart,
			TimestampTz wend, Datum *keyvals, bool *keynulls, StmAggValue *states)
{
	output_row(ab, has_window, wstart, wend, keyvals, keynulls, states, p->out, p->outnulls);
	stm_sink_upsert(ab->sink, p->out, p->outnulls);
	ResetExprContext(ab->out_econtext);
}

/*
 * Update mode: a session's row in the sink is gone; the sink finds it by
 * its key columns (the window start and the group values).
 */
static void
delete_sink_key(StmAggBatch *ab, StatePlans *p, TimestampTz wstart, Datum *keyvals,
				bool *keynulls)
{
	StmAggQuery *agg = ab->agg;

	for (int n = 0; n < list_length(agg->outputs); n++)
	{
		int			k = agg->out_group_col[n];

		p->out[n] = k < 0 ? (Datum) 0 : k == 0 ? TimestampTzGetDatum(wstart) : keyvals[k - 1];
		p->outnulls[n] = k < 0 || (k > 0 && keynulls[k - 1]);
	}
	stm_sink_delete_key(ab->sink, p->out, p->outnulls);
}

/*
 * Windows and groups other than sessions are merged a chunk of groups at a
 * time: one statement reads the chunk's stored rows (by group_hash, locked),
 * and the merged rows of every chunk are written by one INSERT ... ON
 * CONFLICT (group_key) DO UPDATE over them as an ephemeral named relation
 * (a tuplestore, which spills to disk past work_mem).  The statements are
 * planned each time, for the table as it is then; the read is planned with
 * enable_seqscan off, since a state table is seldom analyzed, and without
 * statistics the planner would take a few hundred hashes for most of it.
 */
#define STM_MERGE_CHUNK 4096
#define STM_MERGED_ENR "streaming merged groups"

/* stored rows by group_hash: the first, then next[] chains the others */
typedef struct StoredHash
{
	int64		hash;
	int			first;
} StoredHash;

/* The state table's columns, for the merged rows' relation. */
static TupleDesc
state_desc(StmAggBatch *ab)
{
	StmAggQuery *agg = ab->agg;
	int			nkeys = agg->nkeys;
	int			natts = 4 + nkeys + ab->rt->naggs;
	TupleDesc	desc = CreateTemplateTupleDesc(natts);

	TupleDescInitEntry(desc, 1, "group_key", BYTEAOID, -1, 0);
	TupleDescInitEntry(desc, 2, "window_start", TIMESTAMPTZOID, -1, 0);
	TupleDescInitEntry(desc, 3, "window_end", TIMESTAMPTZOID, -1, 0);
	for (int k = 0; k < nkeys; k++)
	{
		int32		typmod = agg->key_typmods[k];
		Oid			base = getBaseTypeAndTypmod(agg->key_types[k], &typmod);

		TupleDescInitEntry(desc, 4 + k, psprintf("key_%d", k + 1), base, typmod, 0);
	}
	for (int i = 0; i < ab->rt->naggs; i++)
		TupleDescInitEntry(desc, 4 + nkeys + i, psprintf("state_%d", i + 1),
						   ab->rt->fns[i].storedtype, -1, 0);
	TupleDescInitEntry(desc, natts, "group_hash", INT8OID, -1, 0);
	return desc;
}

/*
 * A window and group of the batch: its states combined with its stored
 * row's (found among the chunk's stored rows tt by its hash), the merged
 * row added to rows, and in update mode its sink row upserted.
 */
static void
merge_group(StmAggBatch *ab, StatePlans *p, TupleHashEntry entry, int64 hash,
			SPITupleTable *tt, HTAB *stored, int *next, Tuplestorestate *rows,
			TupleDesc rows_desc)
{
	StmAggRuntime *rt = ab->rt;
	int			nkeys = ab->agg->nkeys;
	StmAggValue *vals = entry->additional;
	StmAggValue merged[FUNC_MAX_ARGS];
	TimestampTz wstart;
	bool		has_window = entry_key(ab, entry, &wstart);
	Datum	   *keyvals = ab->entry_slot->tts_values + 1;
	bool	   *keynulls = ab->entry_slot->tts_isnull + 1;
	TimestampTz wend = group_end(ab, has_window, wstart, keyvals, keynulls);
	StoredHash *sh = hash_search(stored, &hash, HASH_FIND, NULL);
	bytea	   *key = NULL;

	memcpy(merged, vals, sizeof(StmAggValue) * rt->naggs);
	for (int r = sh ? sh->first : -1; r >= 0 && key == NULL; r = next[r])
	{
		HeapTuple	tup = tt->vals[r];
		bool		isnull;
		Datum		ws = SPI_getbinval(tup, tt->tupdesc, 3, &isnull);

		/* the stored row, whatever form of the values created it */
		if (isnull == has_window || (has_window && DatumGetTimestampTz(ws) != wstart))
			continue;			/* another window of the same hash */
		if (!key_matches(ab, tup, tt->tupdesc, 4, keyvals, keynulls))
			continue;			/* another group of the same hash */
		key = DatumGetByteaPCopy(SPI_getbinval(tup, tt->tupdesc, 1, &isnull));
		for (int i = 0; i < rt->naggs; i++)
		{
			Datum		d = SPI_getbinval(tup, tt->tupdesc, 4 + nkeys + i, &isnull);

			stm_agg_load(rt, i, d, isnull, &merged[i]);
			stm_agg_combine(rt, i, &merged[i], &vals[i]);
		}
	}
	if (key == NULL)
	{
		key = group_key(ab, has_window, wstart, keyvals, keynulls);
		ab->rows_added++;		/* the upsert inserts */
	}
	state_row(ab, p, key, has_window, wstart, wend, keyvals, keynulls, merged, hash);
	tuplestore_putvalues(rows, rows_desc, p->vals, p->isnull);
	if (ab->update)
		upsert_sink(ab, p, has_window, wstart, wend, keyvals, keynulls, merged);
}

/*
 * A chunk of the batch's groups: their stored rows read in one statement,
 * then each group merged (merge_group) in the merge context, reset after it.
 */
static void
merge_chunk(StmAggBatch *ab, StatePlans *p, const char *select, TupleHashEntry *entries,
			int n, Tuplestorestate *rows, TupleDesc rows_desc)
{
	MemoryContext cxt = CurrentMemoryContext;
	Datum	   *hd = palloc(sizeof(Datum) * n);
	int64	   *hashes = palloc(sizeof(int64) * n);
	Oid			argtype = INT8ARRAYOID;
	Datum		arg;
	StmStateAccess access;
	int			nest;
	int			rc;
	SPITupleTable *tt;
	uint64		nstored;
	HASHCTL		ctl;
	HTAB	   *stored;
	int		   *next;

	for (int g = 0; g < n; g++)
	{
		TimestampTz wstart;
		bool		has_window = entry_key(ab, entries[g], &wstart);

		hashes[g] = group_hash(ab, has_window, wstart, ab->entry_slot->tts_values + 1,
							   ab->entry_slot->tts_isnull + 1);
		hd[g] = Int64GetDatum(hashes[g]);
	}
	arg = PointerGetDatum(construct_array(hd, n, INT8OID, sizeof(int64), FLOAT8PASSBYVAL,
										  TYPALIGN_DOUBLE));

	/* as the extension's owner, the statement holding only built-in operators on built-in types */
	nest = NewGUCNestLevel();
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	access = stm_statetable_begin();
	/* kept: by the hash index whatever the hashes (enable_seqscan is off for it) */
	rc = stm_spi_execute_kept(select, 1, &argtype, &arg);
	stm_statetable_end(access);
	AtEOXact_GUC(true, nest);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the state table of stream %d", ab->stream_id);
	tt = SPI_tuptable;
	nstored = SPI_processed;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(int64);
	ctl.entrysize = sizeof(StoredHash);
	ctl.hcxt = cxt;
	stored = hash_create("streaming stored groups", Max(nstored, 16), &ctl,
						 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	next = palloc(sizeof(int) * Max(nstored, 1));
	for (uint64 r = 0; r < nstored; r++)
	{
		bool		isnull;
		int64		h = DatumGetInt64(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
		bool		found;
		StoredHash *sh = hash_search(stored, &h, HASH_ENTER, &found);

		next[r] = found ? sh->first : -1;
		sh->first = (int) r;
	}

	for (int g = 0; g < n; g++)
	{
		MemoryContext old = MemoryContextSwitchTo(ab->merge_cxt);

		stm_check_for_interrupts();
		ab->ngroups++;
		merge_group(ab, p, entries[g], hashes[g], tt, stored, next, rows, rows_desc);
		MemoryContextSwitchTo(old);
		MemoryContextReset(ab->merge_cxt);
	}
	SPI_freetuptable(tt);
	hash_destroy(stored);
}

/* The merged rows into the state table, in one statement. */
static void
write_merged(StmAggBatch *ab, Tuplestorestate *rows, TupleDesc rows_desc, int64 nrows)
{
	EphemeralNamedRelation enr = palloc0(sizeof(EphemeralNamedRelationData));
	StringInfoData sql;
	StmStateAccess access;
	int			rc;
	MemoryContext cxt = CurrentMemoryContext;

	enr->md.name = STM_MERGED_ENR;
	enr->md.reliddesc = InvalidOid;
	enr->md.tupdesc = rows_desc;
	enr->md.enrtype = ENR_NAMED_TUPLESTORE;
	enr->md.enrtuples = nrows;
	enr->reldata = rows;
	if (SPI_register_relation(enr) != SPI_OK_REL_REGISTER)
		elog(ERROR, "could not register the merged groups of stream %d", ab->stream_id);
	initStringInfo(&sql);
	appendStringInfo(&sql, "INSERT INTO %s SELECT * FROM %s ON CONFLICT (group_key) DO UPDATE "
					 "SET window_end = EXCLUDED.window_end", ab->table,
					 quote_identifier(STM_MERGED_ENR));
	for (int i = 0; i < ab->rt->naggs; i++)
		appendStringInfo(&sql, ", state_%d = EXCLUDED.state_%d", i + 1, i + 1);
	access = stm_statetable_begin();
	rc = stm_spi_execute_reading(sql.data, rows_desc);
	stm_statetable_end(access);
	MemoryContextSwitchTo(cxt);
	if (rc != SPI_OK_INSERT)
		elog(ERROR, "could not write the state table of stream %d", ab->stream_id);
	if (SPI_unregister_relation(STM_MERGED_ENR) != SPI_OK_REL_UNREGISTER)
		elog(ERROR, "could not unregister the merged groups of stream %d", ab->stream_id);
}

/* The batch's groups (not sessions), merged a chunk at a time, written at once. */
static void
merge_window_groups(StmAggBatch *ab)
{
	MemoryContext work = AllocSetContextCreate(ab->cxt, "streaming merge",
											   ALLOCSET_DEFAULT_SIZES);
	MemoryContext old = MemoryContextSwitchTo(work);
	StatePlans	p = {0};
	TupleDesc	rows_desc = state_desc(ab);
	Tuplestorestate *rows = tuplestore_begin_heap(false, false, work_mem);
	int64		nrows = 0;
	int			n = 0;
	int			size = 1024;
	TupleHashEntry *entries = palloc(sizeof(TupleHashEntry) * size);
	tuplehash_iterator iter;
	TupleHashEntry entry;
	StringInfoData sql;

	alloc_rows(ab, &p);
	InitTupleHashIterator(ab->groups, &iter);
	while ((entry = ScanTupleHashTable(ab->groups, &iter)) != NULL)
	{
		if (n == size)
		{
			size *= 2;
			entries = repalloc_huge(entries, sizeof(TupleHashEntry) * size);
		}
		entries[n++] = entry;
	}
	TermTupleHashIterator(&iter);

	initStringInfo(&sql);
	appendStringInfoString(&sql, "SELECT group_key, group_hash, window_start");
	for (int k = 0; k < ab->agg->nkeys; k++)
		appendStringInfo(&sql, ", key_%d", k + 1);
	for (int i = 0; i < ab->rt->naggs; i++)
		appendStringInfo(&sql, ", state_%d", i + 1);
	appendStringInfo(&sql, " FROM %s WHERE group_hash = ANY ($1) FOR UPDATE", ab->table);

	for (int c = 0; c < n; c += STM_MERGE_CHUNK)
	{
		int			m = Min(STM_MERGE_CHUNK, n - c);

		merge_chunk(ab, &p, sql.data, entries + c, m, rows, rows_desc);
		nrows += m;
	}
	if (nrows > 0)
		write_merged(ab, rows, rows_desc, nrows);
	tuplestore_end(rows);
	MemoryContextSwitchTo(old);
	MemoryContextDelete(work);
}

/*
 * A group's sessions of the batch, merged with the stored sessions they
 * reach.  A stored session absorbed by a session that starts elsewhere
 * leaves the state, and in update mode the sink (SPEC 3: its row is
 * replaced by the merged session's).
 */
static void
merge_sessions(StmAggBatch *ab, StatePlans *p, TupleHashEntry entry)
{
	StmAggRuntime *rt = ab->rt;
	int			nkeys = ab->agg->nkeys;
	StmSessionList *list = &((SessionGroup *) entry->additional)->sessions;
	TimestampTz unused;
	Datum	   *keyvals = ab->entry_slot->tts_values + 1;
	bool	   *keynulls = ab->entry_slot->tts_isnull + 1;
	int64		hash;
	Datum		args[FUNC_MAX_ARGS + 3];
	char		nulls[FUNC_MAX_ARGS + 3];
	SPITupleTable *tt;
	uint64		nrows;

	if (list->n == 0)
		return;					/* only late rows */
	(void) entry_key(ab, entry, &unused);
	hash = group_hash(ab, false, 0, keyvals, keynulls);
	args[0] = Int64GetDatum(hash);
	args[1] = TimestampTzGetDatum(list->items[0].start);
	args[2] = TimestampTzGetDatum(list->items[list->n - 1].end);
	nulls[0] = nulls[1] = nulls[2] = ' ';
	if (execute_state_plan(p->sessions, args, nulls, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read the sessions of stream %d", ab->stream_id);
	tt = SPI_tuptable;
	nrows = SPI_processed;
	/* the stored sessions and their states go to the group's merge context */
	for (uint64 r = 0; r < nrows; r++)
	{
		HeapTuple	tup = tt->vals[r];
		bool		isnull;
		bytea	   *key;
		TimestampTz ws;
		TimestampTz we;
		StmAggValue *vals;

		if (!key_matches(ab, tup, tt->tupdesc, 4, keyvals, keynulls))
			continue;			/* another group of the same hash */
		key = DatumGetByteaPCopy(SPI_getbinval(tup, tt->tupdesc, 1, &isnull));
		ws = DatumGetTimestampTz(SPI_getbinval(tup, tt->tupdesc, 2, &isnull));
		we = DatumGetTimestampTz(SPI_getbinval(tup, tt->tupdesc, 3, &isnull));
		vals = palloc(sizeof(StmAggValue) * Max(rt->naggs, 1));
		for (int i = 0; i < rt->naggs; i++)
		{
			Datum		d = SPI_getbinval(tup, tt->tupdesc, 4 + nkeys + i, &isnull);

			stm_agg_load(rt, i, d, isnull, &vals[i]);
		}
		stm_session_add_stored(list, ws, we, vals, key, rt);
	}
	SPI_freetuptable(tt);

	for (int s = 0; s < list->n; s++)
	{
		StmSession *session = &list->items[s];
		bytea	   *key = NULL;
		ListCell   *lc;

		if (!session->from_batch)
			continue;			/* a stored session the batch did not reach */
		/* the stored session that starts where the merged one does keeps its row */
		foreach(lc, session->stored)
			if (((StmStoredSession *) lfirst(lc))->start == session->start)
				key = ((StmStoredSession *) lfirst(lc))->key;
		if (key == NULL)
		{
			key = group_key(ab, true, session->start, keyvals, keynulls);
			ab->rows_added++;	/* the upsert inserts */
		}
		foreach(lc, session->stored)
		{
			StmStoredSession *ref = lfirst(lc);

			if (ref->key == key)
				continue;		/* the same row, rewritten below */
			args[0] = PointerGetDatum(ref->key);
			if (execute_state_plan(p->delete, args, NULL, 0) != SPI_OK_DELETE)
				elog(ERROR, "could not delete a merged session of stream %d", ab->stream_id);
			ab->rows_added -= SPI_processed;
			if (ab->update)
				delete_sink_key(ab, p, ref->start, keyvals, keynulls);
		}
		write_state(ab, p, key, true, session->start, session->end, keyvals, keynulls,
					session->vals, hash);
		if (ab->update)
			upsert_sink(ab, p, true, session->start, session->end, keyvals, keynulls,
						session->vals);
	}
}

/*
 * Merge the groups in memory into the state table and, in update mode,
 * upsert their sink rows; then forget them.  At the end of the batch, and
 * whenever they exceed their share of streaming.batch_memory.
 */
static void
merge_groups(StmAggBatch *ab)
{
	bool		session = ab->agg->window.kind == STM_WINDOW_SESSION;
	StatePlans	plans = {0};
	tuplehash_iterator iter;
	TupleHashEntry entry;
	MemoryContext states_cxt;
	int			nest = stm_catalog_pin_search_path();

	SPI_connect();
	/* stored and combined states live as long as their group's merge */
	states_cxt = stm_agg_set_state_context(ab->rt, ab->merge_cxt);
	if (!session)
		merge_window_groups(ab);
	else
	{
		prepare_state_plans(ab, &plans);
		InitTupleHashIterator(ab->groups, &iter);
		while ((entry = ScanTupleHashTable(ab->groups, &iter)) != NULL)
		{
			MemoryContext old = MemoryContextSwitchTo(ab->merge_cxt);

			stm_check_for_interrupts();
			ab->ngroups++;
			merge_sessions(ab, &plans, entry);
			ab->nlate += ((SessionGroup *) entry->additional)->late.n;
			MemoryContextSwitchTo(old);
			MemoryContextReset(ab->merge_cxt);
		}
		TermTupleHashIterator(&iter);
	}
	(void) stm_agg_set_state_context(ab->rt, states_cxt);
	SPI_finish();
	stm_catalog_unpin_search_path(nest);

	ExecClearTuple(ab->entry_slot);
	ResetTupleHashTable(ab->groups);
	ResetTupleHashTable(ab->late);
	MemoryContextReset(ab->group_cxt);
	ab->nmerges++;
}

/*
 * Merge the batch's groups into the state table and bring the sink up to
 * date.
 */
void
stm_aggbatch_finish(StmAggBatch *ab, Jsonb *stored_rows, StringInfo rows_json,
					int64 *num_state_rows, int64 *num_late_rows)
{
	StmAggQuery *agg = ab->agg;
	StmAggRuntime *rt = ab->rt;
	int			nkeys = agg->nkeys;
	int			nout = list_length(agg->outputs);
	StmAggValue *merged = palloc(sizeof(StmAggValue) * Max(rt->naggs, 1));
	Datum	   *out = palloc(sizeof(Datum) * nout);
	bool	   *outnulls = palloc(sizeof(bool) * nout);
	int			nest;

	merge_groups(ab);
	nest = stm_catalog_pin_search_path();
	SPI_connect();

	/*
	 * complete mode: the sink holds the whole result, from the whole state;
	 * append mode: the groups of windows closed by the watermark are written
	 * once, and forgotten below.  (The cursor is not read-only: its snapshot
	 * must see this batch's upserts.)  Each row's states are loaded into the
	 * merge context, reset after the row.
	 */
	if ((ab->complete && ab->ngroups > 0) || (ab->append && ab->has_watermark))
	{
		Portal		portal;
		Oid			wmtype = TIMESTAMPTZOID;
		Datum		wm = TimestampTzGetDatum(ab->watermark);
		char	   *scan;
		MemoryContext states_cxt;
		StmStateAccess access;

		if (ab->complete)
		{
			stm_sink_truncate(ab->sink);
			scan = psprintf("SELECT * FROM %s WHERE $1 IS NOT NULL", ab->table);
		}
		else
			scan = psprintf("SELECT * FROM %s WHERE window_end <= $1", ab->table);
		/* the cursor's permissions are checked as it opens: as the extension's owner */
		access = stm_statetable_begin();
		portal = SPI_cursor_open_with_args(NULL, scan, 1, &wmtype, &wm, NULL, false, 0);
		stm_statetable_end(access);
		states_cxt = stm_agg_set_state_context(rt, ab->merge_cxt);
		for (;;)
		{
			SPITupleTable *tt;
			uint64		nrows;

			SPI_cursor_fetch(portal, true, 1000);
			if (SPI_processed == 0)
				break;
			/* the sink writes below replace SPI_tuptable and SPI_processed */
			tt = SPI_tuptable;
			nrows = SPI_processed;
			for (uint64 r = 0; r < nrows; r++)
			{
				bool		isnull;
				bool		has_window;
				TimestampTz ws;
				TimestampTz we;
				Datum		keyvals[FUNC_MAX_ARGS];
				bool		keynulls[FUNC_MAX_ARGS];
				MemoryContext old = MemoryContextSwitchTo(ab->merge_cxt);

				ws = DatumGetTimestampTz(SPI_getbinval(tt->vals[r], tt->tupdesc, 2, &isnull));
				has_window = !isnull;
				we = DatumGetTimestampTz(SPI_getbinval(tt->vals[r], tt->tupdesc, 3, &isnull));
				for (int k = 0; k < nkeys; k++)
					keyvals[k] = SPI_getbinval(tt->vals[r], tt->tupdesc, 4 + k, &keynulls[k]);
				for (int i = 0; i < rt->naggs; i++)
				{
					Datum		d = SPI_getbinval(tt->vals[r], tt->tupdesc, 4 + nkeys + i, &isnull);

					stm_agg_load(rt, i, d, isnull, &merged[i]);
				}
				output_row(ab, has_window, ws, we, keyvals, keynulls, merged, out, outnulls);
				stm_sink_insert(ab->sink, out, outnulls);
				ResetExprContext(ab->out_econtext);
				MemoryContextSwitchTo(old);
				MemoryContextReset(ab->merge_cxt);
			}
			SPI_freetuptable(tt);
		}
		(void) stm_agg_set_state_context(rt, states_cxt);
		SPI_cursor_close(portal);
	}

	/* closed windows leave the state after their last output */
	if (ab->has_watermark)
	{
		Oid			wmtype = TIMESTAMPTZOID;
		Datum		wm = TimestampTzGetDatum(ab->watermark);

		StmStateAccess access = stm_statetable_begin();

		if (SPI_execute_with_args(psprintf("DELETE FROM %s WHERE window_end <= $1", ab->table),
								  1, &wmtype, &wm, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not evict closed windows of stream %d", ab->stream_id);
		ab->rows_added -= SPI_processed;
		stm_statetable_end(access);
	}
	*num_late_rows = ab->nlate;

	{
		int64		prev = 0;
		bool		known = stm_statetable_stored_rows(stored_rows, ab->table, &prev);

		*num_state_rows = stm_statetable_rows_after(ab->table, known, prev, ab->rows_added);
		if (rows_json)
			stm_statetable_store_rows(rows_json, ab->table, *num_state_rows);
	}
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
	stm_agg_end(ab->rt);
	MemoryContextDelete(ab->cxt);
	FreeExprContext(ab->out_econtext, true);
}
