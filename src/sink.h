/*
 * sink.h: where a stream's output rows go, as a struct of callbacks.
 *
 * A sink kind is one file (sink_<kind>.c) holding a const StmSinkRoutine,
 * registered by _PG_init, as source kinds are (source.h).  batch.c,
 * aggstate.c, worker.c and the SQL functions go through these callbacks
 * only, so they never name a kind of sink.
 *
 * Every row a callback gets is in the stream query's output order, described
 * by StmSinkOutput; each kind maps it to what it writes (a table's columns,
 * a message).  create_stream asks the kind whether it can take the output
 * (check_output) and to make what is missing (create_output), so that it
 * names no kind itself.  One batch, in the batch's transaction, as the
 * stream's owner:
 *
 *     open            once per runtime (a worker's life, a run_batch); the
 *                     sink lives in the memory context it was opened in
 *     capacity        before the batch: how many rows it may write
 *                     (optional; back-pressure)
 *     begin_batch     the batch's writer, in the batch's memory
 *       insert        a new output row (stateless, append, complete)
 *       upsert        update mode: the row of a changed group, replacing
 *                     the one with the same key columns; upsert mode: a
 *                     row, by its key columns, in source order
 *       delete_key    update mode: the row of a group that is gone (a
 *                     session merged into another); only the key columns
 *                     of the row are set; upsert mode: a change stream's
 *                     delete (cdc_op 'd'), the row as before had it
 *       truncate      complete mode: forget the previous result
 *     end_batch       write what is buffered; the batch may still fail
 *                     and roll back after it
 *     after_commit    work that must wait for the commit (optional)
 *     deliver         a sink outside PostgreSQL: send what committed
 *                     batches left for it, outside any transaction, and
 *                     say whether the stream must wait (optional)
 *     close           when the runtime ends (optional)
 *
 * Tables and sink functions are sinks by the stream's own definition; other
 * kinds (a Kafka sink) are named objects of streaming.sinks, made by a
 * create function of their own (validate), which a stream names as its
 * sink; their rows may wait outside the stream's tables
 * until they are delivered (pending, discard).
 */
#ifndef STM_SINK_H
#define STM_SINK_H

#include "access/tupdesc.h"
#include "fmgr.h"
#include "nodes/execnodes.h"

#include "catalog.h"
#include "query.h"

typedef struct StmSinkRoutine StmSinkRoutine;

/* The stream's output rows: their columns and which ones are the key. */
typedef struct StmSinkOutput
{
	TupleDesc	desc;			/* names, types, typmods, collations */
	bool	   *is_key;			/* the window and group columns of an aggregate;
								 * upsert mode: the key_columns */
	StmOutputMode mode;
	bool		deletes;		/* update mode may call delete_key (session windows) */
	bool		has_change;		/* upsert mode over a change stream (SPEC 2.1.2):
								 * the last column is each row's cdc_op, which
								 * is not written (a sink has no such column) */
} StmSinkOutput;

/* The output columns a sink writes: all but a change column. */
static inline int
stm_sink_output_columns(const StmSinkOutput *out)
{
	return out->desc->natts - (out->has_change ? 1 : 0);
}

/* An open sink; a kind's own struct starts with it. */
typedef struct StmSink
{
	const StmSinkRoutine *routine;
	int32		stream_id;
	char	   *stream_name;
	Oid			owner;			/* the stream's owner */
} StmSink;

/* One batch's writer; a kind's own struct starts with it. */
typedef struct StmSinkBatch
{
	StmSink    *sink;
	const StmSinkOutput *output;
	int64		batch_id;
	EState	   *estate;			/* the batch's executor state */
	int64		rows;			/* rows inserted or upserted */
	bool		deferred;		/* the rows reach the sink only after the
								 * commit (deliver): progress counts them as
								 * they do */
} StmSinkBatch;

/*
 * create_stream's sink: what the stream names (a named sink, a sink
 * function, or a table), and what the kind's check resolves it to.
 */
typedef struct StmSinkTarget
{
	const char *stream;			/* the stream's name */
	const char *sink;			/* the sink argument; NULL: the default (a table named as the stream) */
	StmSinkDef *named;			/* a named sink (streaming.sinks), else NULL */
	Oid			function;		/* the sink_function, else InvalidOid */
	Oid			relid;			/* the table the stream writes (InvalidOid: none, or to be made) */
} StmSinkTarget;

/*
 * What deliver found: whether the stream must wait, and why.  Zero, false
 * and NULLs: nothing holds it back.
 */
typedef struct StmSinkStatus
{
	int64		pending;		/* rows of committed batches not delivered yet */
	bool		full;			/* no room for another batch (capacity is 0) */
	const char *waiting;		/* why rows wait (status 'waiting', source_error) */
	const char *error;			/* an error delivering meets each time (last_error too) */
} StmSinkStatus;

struct StmSinkRoutine
{
	const char *kind;
	const char *display_name;	/* the kind in messages */

	/* ---- create_stream: required ---- */

	/*
	 * Can the sink take the stream's output?  It checks what the target
	 * names (a table's columns and key, a function's signature, a named
	 * sink's key columns) without changing anything, and resolves it (a
	 * table's relid).  Errors name the column and the stream.
	 */
	void		(*check_output) (StmSinkTarget *target, const StmSinkOutput *output);

	/* ---- batches: required ---- */

	StmSink    *(*open) (StmStreamDef *def);
	StmSinkBatch *(*begin_batch) (StmSink *sink, const StmSinkOutput *output,
								  int64 batch_id, EState *estate);
	void		(*insert) (StmSinkBatch *batch, Datum *values, bool *nulls);
	void		(*upsert) (StmSinkBatch *batch, Datum *values, bool *nulls);
	void		(*delete_key) (StmSinkBatch *batch, Datum *values, bool *nulls);
	void		(*truncate) (StmSinkBatch *batch);
	void		(*end_batch) (StmSinkBatch *batch);

	/* ---- create_stream: optional ---- */

	/*
	 * After every check passed: make what the stream writes into and does
	 * not exist yet (the table sink's table), setting target->relid.
	 */
	void		(*create_output) (StmSinkTarget *target, const StmSinkOutput *output);

	/* ---- batches: optional, set the pointer to NULL if not provided ---- */

	/*
	 * Before a batch, in its transaction: how many rows it may write at most
	 * (-1: no limit).  The source then reads no more records than that (a
	 * stateless stream writes a row per record at most); 0 means no batch
	 * now, and *why says why (the sink is behind).  A batch that writes more
	 * anyway (joins, windows, complete mode) is stopped by the sink with an
	 * error of SQLSTATE 53000 (insufficient resources): the stream waits.
	 */
	int64		(*capacity) (StmSink *sink, const char **why);

	/* After the batch's commit, outside any transaction. */
	void		(*after_commit) (StmSink *sink);

	/*
	 * A sink whose rows leave PostgreSQL after the commit: send what
	 * committed batches left for it, for as long as the kind's own timeout
	 * allows, outside any transaction (it starts its own).  The worker calls it after each
	 * committed batch, when it had nothing to do, and before it exits;
	 * run_batch never does (its batch is not committed yet).  busy: the
	 * worker runs its next batch at once, so the sink need not wait for
	 * what it sent to be confirmed while it has room for that batch (the
	 * confirmations are taken at the next call).  Errors it raises are the
	 * stream's, as a batch's.
	 */
	StmSinkStatus (*deliver) (StmSink *sink, bool busy);

	/* When the runtime ends: give resources back (not in a transaction, maybe). */
	void		(*close) (StmSink *sink);

	/* ---- named sinks (streaming.sinks): optional ---- */

	/*
	 * Check the options its create function gathered (all its arguments by
	 * name, NULLs left out) for the role creating the sink, and return them
	 * as they are to be stored.  Errors name the argument and what is
	 * allowed.
	 */
	Jsonb	   *(*validate) (Jsonb *options, Oid role);

	/*
	 * Once the sink is created (optional), with its stored options: WARN
	 * about what they name that cannot be reached or is missing now, as a
	 * source's probe.
	 */
	void		(*probe) (const char *name, Jsonb *options);

	/*
	 * Rows of the stream that committed batches wrote and the sink has not
	 * delivered yet (read in a fresh snapshot), counted up to limit
	 * (process_available asks every 20 ms whether there are any), and
	 * forgetting them when the stream is dropped.
	 */
	int64		(*pending) (int32 stream_id, int64 limit);
	void		(*discard) (int32 stream_id);
};

/* the built-in kinds */
extern const StmSinkRoutine stm_table_sink_routine;
extern const StmSinkRoutine stm_function_sink_routine;

extern void stm_sink_register(const StmSinkRoutine *routine);
extern const StmSinkRoutine *stm_sink_routine(const char *kind);
extern const char *stm_sink_kind(StmStreamDef *def);
extern StmSink *stm_sink_open(StmStreamDef *def);
extern StmSinkOutput *stm_sink_output(StmQueryInfo *qi, StmOutputMode mode, List *key_columns);
extern void stm_sink_apply_change(StmSinkBatch *batch, Datum *values, bool *nulls);
extern bool stm_sink_change_is_delete(const StmSinkOutput *output, const Datum *values,
									  const bool *nulls);
extern const StmSinkRoutine *stm_sink_routine_of_stream(StmStreamDef *def);
extern const StmSinkRoutine *stm_sink_routine_of_target(const StmSinkTarget *target);

/* api_sink.c: the create and drop functions of every named kind */
extern Datum stm_api_create_sink(FunctionCallInfo fcinfo, const StmSinkRoutine *routine);
extern Datum stm_api_drop_sink_of_kind(FunctionCallInfo fcinfo, const StmSinkRoutine *routine);

/* the batch's calls */
static inline StmSinkBatch *
stm_sink_begin_batch(StmSink *sink, const StmSinkOutput *output, int64 batch_id, EState *estate)
{
	return sink->routine->begin_batch(sink, output, batch_id, estate);
}

/* A stateless query's row (in upsert mode a change: stm_sink_apply_change). */
static inline void
stm_sink_insert(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	if (batch->output->mode == STM_OUTPUT_UPSERT)
	{
		stm_sink_apply_change(batch, values, nulls);
		return;
	}
	batch->rows++;
	batch->sink->routine->insert(batch, values, nulls);
}

static inline void
stm_sink_upsert(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	batch->rows++;
	batch->sink->routine->upsert(batch, values, nulls);
}

static inline void
stm_sink_delete_key(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	batch->sink->routine->delete_key(batch, values, nulls);
}

static inline void
stm_sink_truncate(StmSinkBatch *batch)
{
	batch->sink->routine->truncate(batch);
}

static inline void
stm_sink_end_batch(StmSinkBatch *batch)
{
	batch->sink->routine->end_batch(batch);
}

#endif
