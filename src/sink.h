/*
 * sink.h: where a stream's output rows go, as a struct of callbacks.
 *
 * A sink kind is one file (sink_<kind>.c) holding a const StmSinkRoutine,
 * registered by _PG_init, as source kinds are (source.h).  batch.c and
 * aggstate.c write through these callbacks only, so they never name a kind
 * of sink.
 *
 * Every row a callback gets is in the stream query's output order, described
 * by StmSinkOutput; each kind maps it to what it writes (a table's columns,
 * a message).  One batch, in the batch's transaction, as the stream's owner:
 *
 *     open            once per runtime (a worker's life, a run_batch); the
 *                     sink lives in the memory context it was opened in
 *     begin_batch     the batch's writer, in the batch's memory
 *       insert        a new output row (stateless, append, complete)
 *       upsert        update mode: the row of a changed group, replacing
 *                     the one with the same key columns
 *       delete_key    update mode: the row of a group that is gone (a
 *                     session merged into another); only the key columns
 *                     of the row are set
 *       truncate      complete mode: forget the previous result
 *     end_batch       write what is buffered; the batch may still fail
 *                     and roll back after it
 *     after_commit    work that must wait for the commit (optional)
 *     close           when the runtime ends (optional)
 */
#ifndef STM_SINK_H
#define STM_SINK_H

#include "access/tupdesc.h"
#include "nodes/execnodes.h"

#include "catalog.h"
#include "query.h"

typedef struct StmSinkRoutine StmSinkRoutine;

/* The stream's output rows: their columns and which ones are the key. */
typedef struct StmSinkOutput
{
	TupleDesc	desc;			/* names, types, typmods, collations */
	bool	   *is_key;			/* the window and group columns of an aggregate */
	StmOutputMode mode;
} StmSinkOutput;

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
} StmSinkBatch;

struct StmSinkRoutine
{
	const char *kind;

	StmSink    *(*open) (StmStreamDef *def);
	StmSinkBatch *(*begin_batch) (StmSink *sink, const StmSinkOutput *output,
								  int64 batch_id, EState *estate);
	void		(*insert) (StmSinkBatch *batch, Datum *values, bool *nulls);
	void		(*upsert) (StmSinkBatch *batch, Datum *values, bool *nulls);
	void		(*delete_key) (StmSinkBatch *batch, Datum *values, bool *nulls);
	void		(*truncate) (StmSinkBatch *batch);
	void		(*end_batch) (StmSinkBatch *batch);

	/* optional */
	void		(*after_commit) (StmSink *sink);
	void		(*close) (StmSink *sink);
};

/* the built-in kinds */
extern const StmSinkRoutine stm_table_sink_routine;
extern const StmSinkRoutine stm_function_sink_routine;

extern void stm_sink_register(const StmSinkRoutine *routine);
extern const StmSinkRoutine *stm_sink_routine(const char *kind);
extern const char *stm_sink_kind(StmStreamDef *def);
extern StmSink *stm_sink_open(StmStreamDef *def);
extern StmSinkOutput *stm_sink_output(StmQueryInfo *qi, StmOutputMode mode);
extern char *stm_sink_table_ddl(const StmSinkOutput *out, const char *qualified_name, bool keyed);

/* the batch's calls */
static inline StmSinkBatch *
stm_sink_begin_batch(StmSink *sink, const StmSinkOutput *output, int64 batch_id, EState *estate)
{
	return sink->routine->begin_batch(sink, output, batch_id, estate);
}

static inline void
stm_sink_insert(StmSinkBatch *batch, Datum *values, bool *nulls)
{
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
