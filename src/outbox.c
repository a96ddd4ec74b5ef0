/*
 * outbox.c: the outbox (SPEC 6.1), the service of every sink whose rows
 * leave PostgreSQL after the commit (outbox.h); a kind adds its messages'
 * encoding and a transport (StmOutboxTransport), as the Kafka sink does.
 *
 * Storage.  One row of streaming.outbox_chunks holds a run of a batch's
 * messages (first_seq, nmsgs) in one bytea: for each, the key's length as
 * a 4-byte big-endian integer (-1: no key) and its bytes, then the value's
 * the same way (-1: a tombstone).  A row per message cost more than the
 * table sink's whole row (its heap tuple, primary key entry and delete); a
 * chunk of about one page costs one of each for dozens of messages.
 * Big-endian, so that a dump restores on any machine.
 * streaming.outbox_messages(bytea) unpacks a chunk for the view
 * streaming.outbox.  It may be called with any bytes, so every length is
 * checked against what is left: a malformed chunk is an error, never a
 * read past its end.
 *
 * Writing.  In the batch's transaction, through the table sink's writer
 * opened as the extension's owner (the outbox is that role's: built-in
 * types, no triggers), seq counting from 0 in each batch in the order the
 * batch wrote its messages.  The batch's chunks are kept in memory too
 * (the stage, up to a quarter of batch_memory): after its commit they are
 * sent from there, and the table is read only for what is not (a crash,
 * an outage, a large batch).
 *
 * Delivery (stm_outbox_deliver, the worker's, outside any transaction).
 * Messages go to the transport in rounds of about ROUND_ROWS, in
 * (batch_id, seq) order: the stage once everything before it was sent,
 * else the outbox's chunks after the cursor, by its primary key.  A round
 * whose messages were all reported is finished in one transaction: the
 * chunks whose messages are all done go, their batches' progress rows
 * count them (num_delivered_rows, num_rejected_rows), refused ones become
 * dead letters.
 *
 * Invariants:
 * - a stream's outbox never holds more than streaming.outbox_max_rows rows:
 *   capacity bounds the batch's input by the room left (and half the
 *   bound, so batches and deliveries overlap), and a batch that writes
 *   more anyway fails (53000 while rows wait: the stream waits and runs it
 *   again after the delivery; 54000 when the outbox was empty: it can
 *   never fit);
 * - messages reach the transport in outbox order, each once per client:
 *   what is in flight stays in flight across deliver calls, and after a
 *   failure nothing new is sent until nothing is in flight, then
 *   everything not delivered is sent again from the outbox's first row
 *   (a transport that keeps order, as an idempotent producer does, keeps
 *   it per destination);
 * - a chunk leaves the outbox only once each of its messages was reported
 *   delivered or refused as too large: such a message goes to
 *   dead_letters with its outbox position, counted in the batch's
 *   num_rejected_rows, and the rest go on;
 * - the runtime knows the outbox's rows exactly: counted at open, then its
 *   own batches add (after_commit) and its own deliveries delete (a stream
 *   runs in one place at a time).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/pg_bswap.h"
#include "storage/ipc.h"
#include "storage/pmsignal.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "deadletter.h"
#include "guc.h"
#include "outbox.h"
#include "sink_table.h"

PG_FUNCTION_INFO_V1(streaming_outbox_messages);

#define OUTBOX_NATTS 5			/* stream_id, batch_id, first_seq, nmsgs, messages */
#define ROUND_ROWS 10000		/* messages sent together, and finished in one transaction */
#define POLL_MS 10

/*
 * Messages with the transport at a time, at most.  The client allocates
 * each one (Kafka: the message and its headers, a few hundred bytes) until
 * its report: a window of a few rounds keeps that memory small and reused,
 * whatever the batch's size.  Measured with bench/kafka_sink.sh (one batch
 * of 300k messages): the whole batch in flight (up to a quarter of
 * batch_memory of OutMsgs, 349k) cost 25-60% more CPU in the worker, most of
 * it page faults and malloc growing its heap again, and 50 MB more RSS.
 */
#define IN_FLIGHT_ROWS (4 * ROUND_ROWS)
#define STAGE_BYTES ((Size) stm_guc_batch_memory_kb * 1024 / 4)	/* messages kept for delivery */

/* Messages of one chunk, at the most (each has two lengths of 4 bytes). */
#define CHUNK_MAX_MSGS (STM_OUTBOX_CHUNK_BYTES / 8 + 1)

typedef struct Round Round;

/* One message given to the transport; its report's ref. */
typedef struct OutMsg
{
	Round	   *round;
	int64		batch_id;
	int64		seq;
	int64		chunk_seq;		/* its outbox chunk: first_seq and nmsgs */
	int			chunk_n;
	StmOutboxOutcome state;		/* IN_FLIGHT until reported */
	int			error;			/* the transport's */
} OutMsg;

/* Messages sent together, oldest first. */
struct Round
{
	int			alloc;			/* room for so many */
	int			n;				/* sent */
	int			ndone;			/* reported */
	OutMsg	   *msgs;
};

/* A chunk of the last batch, as it went into the outbox (its messages' bytes). */
typedef struct StagedChunk
{
	int64		first_seq;
	int			nmsgs;
	Size		off;			/* its bytes: at stage_buf + off */
	int			len;
} StagedChunk;

/* A message refused as too large, of the chunk being counted. */
typedef struct Refused
{
	int64		seq;
	int			error;
} Refused;

/* A refused message read from its chunk, for dead_letters. */
typedef struct DeadMsg
{
	int64		batch_id;
	int64		seq;
	int			error;
	int64		bytes;			/* key and value */
	char	   *value;			/* NULL: a tombstone */
	int			valuelen;
} DeadMsg;

/* A chunk finish_rounds found done, to delete. */
typedef struct DoneChunk
{
	int64		batch_id;
	int64		chunk_seq;
	int			delivered;
	List	   *refused;		/* Refused */
} DoneChunk;

/* The outbox of one open sink. */
struct StmOutbox
{
	MemoryContext cxt;			/* the sink's */
	Oid			relid;			/* streaming.outbox_chunks */
	TupleDesc	desc;			/* its columns, for the table sink's writer */

	int64		outbox_rows;	/* rows of committed batches in it (in flight too) */
	int64		batch_rows;		/* rows the batch in progress wrote */

	/*
	 * The last batch's chunks as it wrote them (a prefix of them, up to
	 * STAGE_BYTES), one after the other in stage_buf.  The stage's memory
	 * is kept from batch to batch: given back after each (a memory
	 * context's reset), malloc returned its large blocks to the kernel and
	 * the next batch faulted in fresh pages again, 4 kB at a time.
	 */
	MemoryContext stage_cxt;
	int64		stage_batch;
	StagedChunk *stage;
	int			nstage;
	int			stage_next;		/* the first chunk not sent yet (in part) */
	int			stage_alloc;
	Size		stage_bytes;	/* its chunks' bytes and StagedChunks */
	char	   *stage_buf;
	Size		stage_buf_used;
	Size		stage_buf_size;
	bool		staging;		/* the batch in progress is being kept */
	bool		stage_ready;	/* its batch committed, with stage_rows rows */
	bool		stage_started;	/* some of it was sent */
	int64		stage_rows;

	/* delivery */
	bool		connected;		/* the transport has a client */
	bool		destination_ok; /* checked fine since the last failure */
	List	   *rounds;			/* Round, in flight, oldest first */
	List	   *spare_rounds;	/* Round, finished, for new_round to use again */
	int64		in_flight;		/* messages of those rounds not finished yet */
	int64		max_in_flight;	/* at most (IN_FLIGHT_ROWS, or fewer OutMsgs than a quarter of batch_memory) */
	bool		queue_full;		/* the last try to send found no room */
	bool		have_cursor;	/* rows up to the cursor are sent */
	int64		cursor_batch;
	int64		cursor_seq;
	int64		cursor_chunk;	/* the chunk of cursor_seq */
	bool		failed;			/* a message failed: send nothing new until the
								 * rounds drain, then start again from the outbox */
	int			fail_error;

	/*
	 * The chunk whose messages finish_rounds is counting: it leaves the
	 * outbox once all of them, from its first, were done in a row.
	 */
	int64		carry_batch;
	int64		carry_chunk;	/* its first_seq; -1: none */
	int			carry_n;
	int			carry_seen;
	int			carry_delivered;
	bool		carry_ok;		/* none of them failed */
	List	   *carry_refused;	/* Refused */

	char		waiting[STM_OUTBOX_TEXT_LEN];
	char		error[STM_OUTBOX_TEXT_LEN];
};

/* One batch's writer. */
struct StmOutboxWriter
{
	StmOutboxSink *sink;
	StmSinkBatch *table;		/* the table writer of streaming.outbox_chunks */
	StmSinkOutput output;
	int64		batch_id;
	int64		seq;
	int64		start_rows;		/* the outbox's rows when the batch began */
	StringInfoData chunk;		/* the chunk being filled */
	int64		chunk_seq;		/* its first message's seq */
	int			chunk_n;		/* its messages */
};

/* ---- the chunk format --------------------------------------------------- */

static void
append_part(StringInfo chunk, const char *bytes, int len)
{
	uint32		n = pg_hton32(bytes ? (uint32) len : (uint32) -1);

	appendBinaryStringInfo(chunk, (const char *) &n, sizeof(n));
	if (bytes && len > 0)
		appendBinaryStringInfo(chunk, bytes, len);
}

/* Add a message to a chunk. */
void
stm_outbox_append(StringInfo chunk, const char *key, int keylen, const char *value, int valuelen)
{
	append_part(chunk, key, keylen);
	append_part(chunk, value, valuelen);
}

void
stm_outbox_reader_init(StmOutboxReader *r, const char *data, int len)
{
	r->data = data;
	r->len = len;
	r->pos = 0;
}

static void
read_part(StmOutboxReader *r, const char **bytes, int *len)
{
	uint32		n;
	int32		v;

	if (r->len - r->pos < (int) sizeof(n))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("malformed outbox chunk: it ends inside a length, at byte %d", r->pos)));
	memcpy(&n, r->data + r->pos, sizeof(n));
	r->pos += sizeof(n);
	v = (int32) pg_ntoh32(n);
	if (v == -1)
	{
		*bytes = NULL;
		*len = 0;
		return;
	}
	if (v < 0 || v > r->len - r->pos)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("malformed outbox chunk: a length of %d at byte %d, with %d bytes left",
						v, r->pos - (int) sizeof(n), r->len - r->pos)));
	*bytes = r->data + r->pos;
	*len = v;
	r->pos += v;
}

/* The next message of the chunk, or false at its end. */
bool
stm_outbox_next(StmOutboxReader *r, StmOutboxMsg *msg)
{
	if (r->pos >= r->len)
		return false;
	read_part(r, &msg->key, &msg->keylen);
	read_part(r, &msg->value, &msg->valuelen);
	return true;
}

/* streaming.outbox_messages(chunk bytea) RETURNS TABLE (ord int, key bytea, value bytea) */
Datum
streaming_outbox_messages(PG_FUNCTION_ARGS)
{
	bytea	   *chunk = PG_GETARG_BYTEA_PP(0);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	StmOutboxReader r;
	StmOutboxMsg m;
	int32		ord = 0;

	InitMaterializedSRF(fcinfo, 0);
	stm_outbox_reader_init(&r, VARDATA_ANY(chunk), VARSIZE_ANY_EXHDR(chunk));
	while (stm_outbox_next(&r, &m))
	{
		Datum		values[3];
		bool		nulls[3] = {false, m.key == NULL, m.value == NULL};

		values[0] = Int32GetDatum(ord++);
		values[1] = m.key ? PointerGetDatum(cstring_to_text_with_len(m.key, m.keylen)) : (Datum) 0;
		values[2] = m.value ? PointerGetDatum(cstring_to_text_with_len(m.value, m.valuelen)) : (Datum) 0;
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/* ---- the outbox of a sink ------------------------------------------------ */

static Oid
outbox_relid(void)
{
	Oid			relid = get_relname_relid("outbox_chunks", get_namespace_oid("streaming", false));

	if (!OidIsValid(relid))
		elog(ERROR, "streaming.outbox_chunks is missing");
	return relid;
}

/* The transport's client goes; what it did not report counts as failed. */
static void
disconnect(StmOutboxSink *sink)
{
	StmOutbox  *ob = sink->outbox;
	ListCell   *lc;

	if (!ob->connected)
		return;
	sink->transport->disconnect(sink);
	ob->connected = false;
	foreach(lc, ob->rounds)
	{
		Round	   *r = lfirst(lc);

		for (int i = 0; i < r->n; i++)
			if (r->msgs[i].state == STM_OUTBOX_IN_FLIGHT)
			{
				r->msgs[i].state = STM_OUTBOX_FAILED;
				r->msgs[i].error = 0;
				r->ndone++;
			}
	}
	ob->destination_ok = false;
}

static void
outbox_reset_cb(void *arg)
{
	disconnect((StmOutboxSink *) arg);
}

/*
 * open: the sink's StmSink and its outbox, in the sink's memory context
 * (the runtime's), whose end disconnects the transport.  The kind has set
 * the sink's names (outbox.h) and read its definition.
 */
void
stm_outbox_open(StmOutboxSink *sink, StmStreamDef *def, const StmSinkRoutine *routine,
				const StmOutboxTransport *transport)
{
	StmOutbox  *ob = palloc0(sizeof(StmOutbox));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	Oid			type = INT4OID;
	Datum		arg = Int32GetDatum(def->id);
	bool		isnull;
	Datum		rows;

	sink->base.routine = routine;
	sink->base.stream_id = def->id;
	sink->base.stream_name = pstrdup(def->name);
	sink->base.owner = def->owner;
	sink->transport = transport;
	sink->outbox = ob;
	ob->cxt = CurrentMemoryContext;
	ob->relid = outbox_relid();
	ob->desc = CreateTemplateTupleDesc(OUTBOX_NATTS);
	TupleDescInitEntry(ob->desc, 1, "stream_id", INT4OID, -1, 0);
	TupleDescInitEntry(ob->desc, 2, "batch_id", INT8OID, -1, 0);
	TupleDescInitEntry(ob->desc, 3, "first_seq", INT8OID, -1, 0);
	TupleDescInitEntry(ob->desc, 4, "nmsgs", INT4OID, -1, 0);
	TupleDescInitEntry(ob->desc, 5, "messages", BYTEAOID, -1, 0);
	ob->carry_chunk = -1;
	rows = stm_catalog_value("SELECT sum(nmsgs)::bigint FROM streaming.outbox_chunks WHERE stream_id = $1",
							 1, &type, &arg, &isnull);
	ob->outbox_rows = isnull ? 0 : DatumGetInt64(rows);
	ob->stage_cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming outbox stage",
										  ALLOCSET_DEFAULT_SIZES);
	cb->func = outbox_reset_cb;
	cb->arg = sink;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
}

/*
 * Before a batch: the outbox's room (the runtime knows its rows exactly).
 */
int64
stm_outbox_capacity(StmSink *base, const char **why)
{
	StmOutboxSink *sink = (StmOutboxSink *) base;
	StmOutbox  *ob = sink->outbox;

	if (ob->outbox_rows >= stm_guc_outbox_max_rows)
	{
		*why = psprintf("the %s sink \"%s\" is behind: the outbox holds " INT64_FORMAT
						" rows of the stream (streaming.outbox_max_rows = %d)",
						base->routine->display_name, sink->name, ob->outbox_rows,
						stm_guc_outbox_max_rows);
		return 0;
	}

	/*
	 * At most half the outbox: the batch after it finds room while this
	 * one's messages are still in flight, so it runs as they are sent
	 * (deliver's busy) instead of waiting for their delivery
	 */
	return Min(stm_guc_outbox_max_rows - ob->outbox_rows, Max(stm_guc_outbox_max_rows / 2, 1));
}

/* The batch committed: its rows are the outbox's. */
void
stm_outbox_after_commit(StmSink *base)
{
	StmOutbox  *ob = ((StmOutboxSink *) base)->outbox;

	ob->outbox_rows += ob->batch_rows;
	ob->stage_rows = ob->batch_rows;
	ob->stage_ready = ob->nstage > 0;
	ob->staging = false;
	ob->batch_rows = 0;
}

void
stm_outbox_close(StmSink *base)
{
	disconnect((StmOutboxSink *) base);
}

/*
 * The stream's messages in the outbox, up to limit (or a chunk's more), by
 * its primary key in a fresh snapshot: a sum over the table would read it
 * whole, dead rows of delivered batches too, while process_available polls.
 */
int64
stm_outbox_pending(int32 stream_id, int64 limit)
{
	Relation	rel = table_open(outbox_relid(), AccessShareLock);
	Relation	idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	Snapshot	snap = RegisterSnapshot(GetLatestSnapshot());
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	ScanKeyData key;
	IndexScanDesc scan;
	int64		n = 0;

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(stream_id));
	scan = index_beginscan(rel, idx, snap, 1, 0);
	index_rescan(scan, &key, 1, NULL, 0);
	while (n < limit && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;

		n += DatumGetInt32(slot_getattr(slot, 4, &isnull));
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snap);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	return n;
}

/* drop_stream: what is left of the stream's messages goes. */
void
stm_outbox_discard(int32 stream_id)
{
	Oid			type = INT4OID;
	Datum		arg = Int32GetDatum(stream_id);

	stm_catalog_exec("DELETE FROM streaming.outbox_chunks WHERE stream_id = $1", 1, &type, &arg, NULL,
					 SPI_OK_DELETE);
}

/* ---- writing a batch ----------------------------------------------------- */

/* Let the stage go: what it held is read from the outbox when its turn comes. */
static void
drop_stage(StmOutbox *ob)
{
	ob->nstage = 0;
	ob->stage_buf_used = 0;
	ob->stage_next = 0;
	ob->stage_started = false;
	ob->stage_bytes = 0;
	ob->stage_ready = false;
}

/*
 * The batch's writer: the stage starts again, and the outbox is opened,
 * and its INSERT checked, as the extension's owner.
 */
StmOutboxWriter *
stm_outbox_begin_batch(StmOutboxSink *sink, int64 batch_id, EState *estate)
{
	StmOutbox  *ob = sink->outbox;
	StmOutboxWriter *w = palloc0(sizeof(StmOutboxWriter));
	StmCatalogScope scope;

	w->sink = sink;
	w->batch_id = batch_id;
	w->start_rows = ob->outbox_rows;
	ob->batch_rows = 0;
	drop_stage(ob);
	ob->stage_batch = batch_id;
	ob->staging = true;
	initStringInfo(&w->chunk);
	appendStringInfoSpaces(&w->chunk, VARHDRSZ);	/* the row's varlena header */

	w->output.desc = ob->desc;
	w->output.is_key = palloc0(sizeof(bool) * OUTBOX_NATTS);
	w->output.mode = STM_OUTPUT_APPEND;
	scope = stm_catalog_begin();
	w->table = stm_table_sink_begin(&sink->base, ob->relid, &w->output, batch_id, estate);
	stm_catalog_end(scope);
	return w;
}

/*
 * The outbox has no room for another row of this batch: the batch rolls
 * back.  While rows wait for delivery the stream waits and runs it again
 * (53000); a batch that alone writes more than the outbox may hold never
 * fits.
 */
static void
outbox_full(StmOutboxWriter *w)
{
	StmOutboxSink *sink = w->sink;

	if (w->start_rows > 0)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_RESOURCES),
				 errmsg("the %s sink \"%s\" is behind: batch " INT64_FORMAT " of stream \"%s\" writes more rows than its outbox has room for",
						sink->base.routine->display_name, sink->name, w->batch_id,
						sink->base.stream_name),
				 errdetail(INT64_FORMAT " rows wait for delivery (streaming.outbox_max_rows = %d); the batch runs again once they are delivered.",
						   w->start_rows, stm_guc_outbox_max_rows)));
	ereport(ERROR,
			(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
			 errmsg("batch " INT64_FORMAT " of stream \"%s\" writes more than streaming.outbox_max_rows (%d) rows to its %s sink \"%s\"",
					w->batch_id, sink->base.stream_name, stm_guc_outbox_max_rows,
					sink->base.routine->display_name, sink->name),
			 errhint("Raise streaming.outbox_max_rows, or make batches smaller (the source's max_offsets_per_trigger).")));
}

/* Keep a chunk of the batch for its delivery, while the stage has room. */
static void
stage_chunk(StmOutbox *ob, int64 first_seq, int nmsgs, const char *data, int len)
{
	StagedChunk *c;

	if (ob->stage_bytes + len + sizeof(StagedChunk) > STAGE_BYTES)
	{
		ob->staging = false;	/* the rest is read from the outbox */
		return;
	}
	if (ob->nstage == ob->stage_alloc)
	{
		ob->stage_alloc = Max(64, ob->stage_alloc * 2);
		ob->stage = ob->stage ?
			repalloc_huge(ob->stage, sizeof(StagedChunk) * ob->stage_alloc) :
			MemoryContextAllocHuge(ob->stage_cxt, sizeof(StagedChunk) * ob->stage_alloc);
	}
	if (ob->stage_buf_used + len > ob->stage_buf_size)
	{
		/* doubled up to what the stage may hold (stage_bytes counts these bytes too) */
		Size		size = Max(Max((Size) 64 * 1024, ob->stage_buf_size * 2),
							   ob->stage_buf_used + len);

		size = Max(Min(size, STAGE_BYTES), ob->stage_buf_used + len);
		ob->stage_buf = ob->stage_buf ?
			repalloc_huge(ob->stage_buf, size) :
			MemoryContextAllocHuge(ob->stage_cxt, size);
		ob->stage_buf_size = size;
	}
	c = &ob->stage[ob->nstage++];
	c->first_seq = first_seq;
	c->nmsgs = nmsgs;
	c->len = len;
	c->off = ob->stage_buf_used;
	memcpy(ob->stage_buf + c->off, data, len);
	ob->stage_buf_used += len;
	ob->stage_bytes += len + sizeof(StagedChunk);
}

/*
 * The chunk being filled goes into the outbox as one row (the buffer starts
 * with room for its varlena header: the row is made from it in place), and
 * into the stage while it has room.
 */
static void
flush_chunk(StmOutboxWriter *w)
{
	StmOutbox  *ob = w->sink->outbox;
	Datum		row[OUTBOX_NATTS];
	bool		rownulls[OUTBOX_NATTS] = {false, false, false, false, false};

	if (w->chunk_n == 0)
		return;
	SET_VARSIZE(w->chunk.data, w->chunk.len);
	row[0] = Int32GetDatum(w->sink->base.stream_id);
	row[1] = Int64GetDatum(w->batch_id);
	row[2] = Int64GetDatum(w->chunk_seq);
	row[3] = Int32GetDatum(w->chunk_n);
	row[4] = PointerGetDatum(w->chunk.data);
	stm_table_sink_insert(w->table, row, rownulls);
	if (ob->staging)
		stage_chunk(ob, w->chunk_seq, w->chunk_n, w->chunk.data + VARHDRSZ,
					w->chunk.len - VARHDRSZ);
	w->chunk.len = VARHDRSZ;
	w->chunk_n = 0;
}

/* The batch's next message (seq: the next), within the outbox's bound. */
void
stm_outbox_write(StmOutboxWriter *w, const char *key, int keylen, const char *value, int valuelen)
{
	StmOutbox  *ob = w->sink->outbox;
	int			len = 8 + (key ? keylen : 0) + (value ? valuelen : 0);

	if (ob->outbox_rows + ob->batch_rows >= stm_guc_outbox_max_rows)
		outbox_full(w);
	if (w->chunk_n > 0 && w->chunk.len - VARHDRSZ + len > STM_OUTBOX_CHUNK_BYTES)
		flush_chunk(w);
	if (w->chunk_n == 0)
		w->chunk_seq = w->seq;
	stm_outbox_append(&w->chunk, key, keylen, value, valuelen);
	w->chunk_n++;
	w->seq++;
	ob->batch_rows++;
}

/* The batch's last chunk; the batch may still fail and roll back after it. */
void
stm_outbox_end_batch(StmOutboxWriter *w)
{
	flush_chunk(w);
	stm_table_sink_end(w->table);
	pfree(w->chunk.data);
}

/* ---- delivery: sending --------------------------------------------------- */

/*
 * The stream's outbox messages that were sent and are still in the
 * outbox: those in flight, and those of a chunk done in part (carry_*),
 * which leaves the outbox with its last message.
 */
static int64
produced_rows(StmOutbox *ob)
{
	return ob->in_flight + (ob->carry_chunk >= 0 ? ob->carry_seen : 0);
}

/*
 * The transport's report of a message: recorded only (a transport may call
 * it from a callback of its client's, on our thread).
 */
void
stm_outbox_report(void *ref, StmOutboxOutcome outcome, int error)
{
	OutMsg	   *msg = ref;

	if (msg == NULL || msg->state != STM_OUTBOX_IN_FLIGHT)
		return;
	msg->error = error;
	msg->state = outcome;
	msg->round->ndone++;
}

/*
 * Is the destination there, and may we write to it (the transport's
 * check)?  A lasting error (st->error) or a reason to wait (st->waiting)
 * when it is not.
 */
static bool
check_destination(StmOutboxSink *sink, int timeout_ms, StmSinkStatus *st)
{
	StmOutbox  *ob = sink->outbox;
	char		text[STM_OUTBOX_TEXT_LEN];

	text[0] = '\0';
	switch (sink->transport->check_destination(sink, timeout_ms, text, sizeof(text)))
	{
		case STM_OUTBOX_DEST_OK:
			ob->destination_ok = true;
			return true;
		case STM_OUTBOX_DEST_WAIT:
			strlcpy(ob->waiting, text, STM_OUTBOX_TEXT_LEN);
			st->waiting = ob->waiting;
			return false;
		case STM_OUTBOX_DEST_ERROR:
			strlcpy(ob->error, text, STM_OUTBOX_TEXT_LEN);
			st->error = ob->error;
			return false;
	}
	return false;				/* keep compiler quiet */
}

/*
 * The stream's outbox chunks in (batch_id, first_seq) order, by the primary
 * key: those of batch (chunk >= 0: with first_seq = chunk, or >= chunk if
 * from), or, batch_gt, those of every batch after batch.  A scan of the
 * extension's own table in C, as catalog scans are: the planner has no say
 * in how far it reads.
 */
static IndexScanDesc
outbox_scan(Relation rel, Relation idx, int32 stream_id, int64 batch, bool batch_gt, int64 chunk,
			bool from)
{
	ScanKeyData keys[3];
	int			n = 0;
	IndexScanDesc scan;

	ScanKeyInit(&keys[n++], 1, BTEqualStrategyNumber, F_INT4EQ, Int32GetDatum(stream_id));
	if (batch_gt)
	{
		if (batch >= 0)
			ScanKeyInit(&keys[n++], 2, BTGreaterStrategyNumber, F_INT8GT, Int64GetDatum(batch));
	}
	else
	{
		ScanKeyInit(&keys[n++], 2, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(batch));
		if (chunk >= 0)
			ScanKeyInit(&keys[n++], 3, from ? BTGreaterEqualStrategyNumber : BTEqualStrategyNumber,
						from ? F_INT8GE : F_INT8EQ, Int64GetDatum(chunk));
	}
	scan = index_beginscan(rel, idx, GetActiveSnapshot(), n, 0);
	index_rescan(scan, keys, n, NULL, 0);
	return scan;
}

/*
 * What sending msg answered (not NO_ROOM): the message is in the round and
 * the cursor moves past it; an outcome known at once is done already; a
 * failure stops the delivery (false).
 */
static bool
account_message(StmOutbox *ob, Round *round, OutMsg *msg, StmOutboxOutcome outcome, int error)
{
	if (outcome != STM_OUTBOX_IN_FLIGHT)
	{
		msg->error = error;
		msg->state = outcome;
		round->ndone++;
	}
	round->n++;
	ob->in_flight++;
	ob->have_cursor = true;
	ob->cursor_batch = msg->batch_id;
	ob->cursor_seq = msg->seq;
	ob->cursor_chunk = msg->chunk_seq;
	if (msg->state == STM_OUTBOX_FAILED)
	{
		ob->failed = true;
		ob->fail_error = error;
		return false;
	}
	return true;
}

/*
 * A new round for at most n messages, at the end of the rounds in flight:
 * a finished one again when there is one (each OutMsg is written whole
 * when sent, so nothing is cleared).  A round's OutMsgs are half a
 * megabyte: freed and allocated again for every round, malloc gave them
 * back to the kernel and took fresh pages, a page fault each 4 kB
 * (bench/kafka_sink.sh).
 */
static Round *
new_round(StmOutbox *ob, int n)
{
	MemoryContext old = MemoryContextSwitchTo(ob->cxt);
	Round	   *round = NULL;

	if (ob->spare_rounds != NIL)
	{
		round = linitial(ob->spare_rounds);
		ob->spare_rounds = list_delete_first(ob->spare_rounds);
		if (round->alloc < n)
		{
			pfree(round->msgs);
			round->msgs = palloc(sizeof(OutMsg) * n);
			round->alloc = n;
		}
		round->n = round->ndone = 0;
	}
	else
	{
		round = palloc0(sizeof(Round));
		round->msgs = palloc(sizeof(OutMsg) * n);
		round->alloc = n;
	}
	ob->rounds = lappend(ob->rounds, round);	/* before anything is sent */
	MemoryContextSwitchTo(old);
	return round;
}

/*
 * A round is done with: kept for the next (as many as can be in flight at
 * once, at most), else freed.
 */
static void
release_round(StmOutbox *ob, Round *round)
{
	if (list_length(ob->spare_rounds) < IN_FLIGHT_ROWS / ROUND_ROWS + 1)
	{
		MemoryContext old = MemoryContextSwitchTo(ob->cxt);

		ob->spare_rounds = lappend(ob->spare_rounds, round);
		MemoryContextSwitchTo(old);
		return;
	}
	pfree(round->msgs);
	pfree(round);
}

/* A round that sent nothing goes. */
static void
forget_if_empty(StmOutbox *ob, Round *round)
{
	if (round->n > 0)
		return;
	ob->rounds = list_delete_ptr(ob->rounds, round);
	release_round(ob, round);
}

typedef enum ChunkResult
{
	CHUNK_DONE,					/* every message after the cursor sent */
	CHUNK_STOPPED,				/* the transport or the round is full */
	CHUNK_FAILED				/* refused: the delivery failed */
} ChunkResult;

/*
 * Send, into round, the messages of a chunk of batch_id that come after
 * the cursor (the rest of a chunk sent in part); *nread counts them.  The
 * stage and the outbox's rows both go through here.
 */
static ChunkResult
produce_chunk(StmOutboxSink *sink, Round *round, int64 batch_id, int64 first, int nmsgs,
			  const char *data, int len, int *nread)
{
	StmOutbox  *ob = sink->outbox;
	StmOutboxReader reader;
	StmOutboxMsg m;

	stm_outbox_reader_init(&reader, data, len);
	m.batch_id = batch_id;
	for (m.seq = first; stm_outbox_next(&reader, &m); m.seq++)
	{
		OutMsg	   *msg;
		StmOutboxOutcome outcome;
		int			error = 0;

		if (ob->have_cursor && batch_id == ob->cursor_batch && m.seq <= ob->cursor_seq)
			continue;			/* sent already */
		if (round->n == round->alloc)
			return CHUNK_STOPPED;	/* the rest in a later round */
		msg = &round->msgs[round->n];
		msg->round = round;
		msg->batch_id = batch_id;
		msg->seq = m.seq;
		msg->chunk_seq = first;
		msg->chunk_n = nmsgs;
		msg->state = STM_OUTBOX_IN_FLIGHT;
		outcome = sink->transport->send(sink, &m, msg, &error);
		if (outcome == STM_OUTBOX_NO_ROOM)
		{
			ob->queue_full = true;
			return CHUNK_STOPPED;	/* this one again, later */
		}
		(*nread)++;
		if (!account_message(ob, round, msg, outcome, error))
			return CHUNK_FAILED;
	}
	return CHUNK_DONE;
}

/*
 * Read the next messages after the cursor from the outbox, in order, and
 * send them; in a transaction of its own.  A round ends at a chunk's end
 * once it has limit messages.  Returns false when the outbox has no more
 * after them.  A full transport ends the round early (the rest are read
 * again, from the cursor inside their chunk); a message refused at once
 * as too large is done already; a failure stops the delivery (failed).
 */
static bool
produce_round(StmOutboxSink *sink, int limit)
{
	StmOutbox  *ob = sink->outbox;
	Round	   *round = new_round(ob, limit + CHUNK_MAX_MSGS);
	int			nread = 0;
	ChunkResult res = CHUNK_DONE;
	int64		produced_before = produced_rows(ob);
	Relation	rel;
	Relation	idx;
	TupleTableSlot *slot;

	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(ob->relid, AccessShareLock);
	idx = index_open(RelationGetPrimaryKeyIndex(rel), AccessShareLock);
	slot = table_slot_create(rel, NULL);
	/* the rest of the cursor's batch, then the batches after it */
	for (int phase = ob->have_cursor ? 0 : 1; phase < 2 && nread < limit && res == CHUNK_DONE; phase++)
	{
		/* from the cursor's chunk on: what is before it was sent */
		IndexScanDesc scan = outbox_scan(rel, idx, sink->base.stream_id,
										 ob->have_cursor ? ob->cursor_batch : -1, phase == 1,
										 phase == 0 ? ob->cursor_chunk : -1, true);

		while (nread < limit && res == CHUNK_DONE &&
			   index_getnext_slot(scan, ForwardScanDirection, slot))
		{
			bytea	   *chunk;

			slot_getallattrs(slot);
			chunk = DatumGetByteaPP(slot->tts_values[4]);
			res = produce_chunk(sink, round, DatumGetInt64(slot->tts_values[1]),
								DatumGetInt64(slot->tts_values[2]), DatumGetInt32(slot->tts_values[3]),
								VARDATA_ANY(chunk), VARSIZE_ANY_EXHDR(chunk), &nread);
		}
		index_endscan(scan);
	}
	ExecDropSingleTupleTableSlot(slot);
	index_close(idx, AccessShareLock);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(ob->cxt);

	forget_if_empty(ob, round);
	/* everything after the cursor was read: the outbox's messages are known exactly */
	if (nread < limit && res == CHUNK_DONE)
		ob->outbox_rows = produced_before + nread;
	return res == CHUNK_STOPPED || nread >= limit;
}

/*
 * The last batch's messages, from the stage, once every message before
 * them was sent (they are next in outbox order), in rounds of about
 * ROUND_ROWS.  A full transport, or max_in_flight messages in flight, ends
 * the call: the next goes on from there (stage_next, and the cursor inside
 * that chunk).  When the stage cannot be used, it goes, and the messages
 * are read from the outbox.
 */
static void
produce_stage(StmOutboxSink *sink)
{
	StmOutbox  *ob = sink->outbox;

	if (ob->failed ||
		(!ob->stage_started &&
		 ((ob->have_cursor && ob->cursor_batch >= ob->stage_batch) ||
		  ob->outbox_rows - ob->stage_rows != produced_rows(ob))))
	{
		drop_stage(ob);
		return;
	}
	ob->stage_started = true;
	while (ob->stage_next < ob->nstage)
	{
		Round	   *round = new_round(ob, ROUND_ROWS + CHUNK_MAX_MSGS);
		ChunkResult res = CHUNK_DONE;
		int			nread = 0;

		while (ob->stage_next < ob->nstage && round->n < ROUND_ROWS && res == CHUNK_DONE)
		{
			StagedChunk *c = &ob->stage[ob->stage_next];

			res = produce_chunk(sink, round, ob->stage_batch, c->first_seq, c->nmsgs,
								ob->stage_buf + c->off, c->len, &nread);
			if (res == CHUNK_DONE)
				ob->stage_next++;
		}
		forget_if_empty(ob, round);
		if (res == CHUNK_FAILED)
			break;				/* the stage goes */
		if (res == CHUNK_STOPPED || ob->in_flight >= ob->max_in_flight)
		{
			ob->queue_full = true;
			return;
		}
	}
	drop_stage(ob);
}

/* ---- delivery: finishing rounds ------------------------------------------ */

/* Add n rows of batch to its progress row's counter (column). */
static void
count_in_progress(int32 stream_id, int64 batch, const char *column, int64 n)
{
	Oid			types[3] = {INT4OID, INT8OID, INT8OID};
	Datum		args[3] = {Int32GetDatum(stream_id), Int64GetDatum(batch), Int64GetDatum(n)};

	stm_catalog_exec(psprintf("UPDATE streaming.batches SET %s = %s + $3 WHERE stream_id = $1 AND batch_id = $2",
							  column, column),
					 3, types, args, NULL, SPI_OK_UPDATE);
}

/*
 * The refused messages of the chunk in slot (c->refused), copied out of it
 * for dead_letters, appended to *dead.
 */
static void
read_refused(DoneChunk *c, TupleTableSlot *slot, List **dead)
{
	bool		isnull;
	bytea	   *chunk = DatumGetByteaPP(slot_getattr(slot, 5, &isnull));
	StmOutboxReader reader;
	StmOutboxMsg m;
	ListCell   *lc = list_head(c->refused);

	stm_outbox_reader_init(&reader, VARDATA_ANY(chunk), VARSIZE_ANY_EXHDR(chunk));
	for (int64 seq = c->chunk_seq; lc != NULL && stm_outbox_next(&reader, &m); seq++)
	{
		Refused    *r = lfirst(lc);
		DeadMsg    *d;

		if (seq != r->seq)
			continue;
		d = palloc0(sizeof(DeadMsg));
		d->batch_id = c->batch_id;
		d->seq = seq;
		d->error = r->error;
		d->bytes = (int64) (m.key ? m.keylen : 0) + (m.value ? m.valuelen : 0);
		if (m.value)
		{
			d->value = palloc(Max(m.valuelen, 1));
			memcpy(d->value, m.value, m.valuelen);
			d->valuelen = m.valuelen;
		}
		*dead = lappend(*dead, d);
		lc = lnext(c->refused, lc);
	}
}

/*
 * Delete the stream's done outbox chunk c, its refused messages read into
 * *dead first; whether it was there.
 */
static bool
delete_chunk(Relation rel, Relation idx, TupleTableSlot *slot, int32 stream_id, DoneChunk *c,
			 List **dead)
{
	IndexScanDesc scan = outbox_scan(rel, idx, stream_id, c->batch_id, false, c->chunk_seq, false);
	bool		found = false;

	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		if (c->refused != NIL)
			read_refused(c, slot, dead);
		simple_table_tuple_delete(rel, &slot->tts_tid, GetActiveSnapshot());
		found = true;
	}
	index_endscan(scan);
	return found;
}

/*
 * Refused messages into dead_letters (the one writer: the value as the
 * record, its position in the outbox, SQLSTATE 54000), counted in their
 * batches' num_rejected_rows.
 */
static void
write_dead_letters(StmOutboxSink *sink, List *dead)
{
	ListCell   *lc;
	int64		batch = -1;
	int64		batch_rows = 0;

	foreach(lc, dead)
	{
		DeadMsg    *d = lfirst(lc);
		StmBadRecord bad = {0};
		uint8		sha256[PG_SHA256_DIGEST_LENGTH];

		if (d->batch_id != batch && batch_rows > 0)
		{
			count_in_progress(sink->base.stream_id, batch, "num_rejected_rows", batch_rows);
			batch_rows = 0;
		}
		batch = d->batch_id;
		bad.sqlerrcode = ERRCODE_PROGRAM_LIMIT_EXCEEDED;
		bad.message = sink->transport->describe_refusal(sink, d->bytes, d->error);
		bad.position = psprintf("{%s, \"batch_id\": " INT64_FORMAT ", \"seq\": " INT64_FORMAT "}",
								sink->position, d->batch_id, d->seq);
		stm_deadletter_describe(&bad, d->value, d->valuelen, sha256);
		stm_deadletter_write(sink->base.stream_id, &bad);
		batch_rows++;
	}
	if (batch_rows > 0)
		count_in_progress(sink->base.stream_id, batch, "num_rejected_rows", batch_rows);
	ereport(WARNING,
			(errmsg("%s refused %d messages of stream \"%s\" as too large",
					sink->destination, list_length(dead), sink->base.stream_name),
			 errdetail("They are in streaming.dead_letters, with their outbox position.")));
}

static void
reset_carry(StmOutbox *ob)
{
	ob->carry_chunk = -1;
	ob->carry_seen = ob->carry_delivered = 0;
	ob->carry_ok = true;
	list_free_deep(ob->carry_refused);
	ob->carry_refused = NIL;
}

/*
 * The done rounds' messages, in outbox order: the chunks whose messages
 * are all done (delivered or refused as too large, from the first), to
 * delete; a chunk with a failed message stays (all of it is sent again),
 * and the first failure stops the delivery.  A chunk that straddles rounds
 * is counted on (carry_*) into the next call.
 */
static List *
done_chunks(StmOutbox *ob, List *done, int64 *removed)
{
	List	   *chunks = NIL;
	ListCell   *lc;
	MemoryContext old = MemoryContextSwitchTo(ob->cxt);

	foreach(lc, done)
	{
		Round	   *r = lfirst(lc);

		for (int i = 0; i < r->n; i++)
		{
			OutMsg	   *m = &r->msgs[i];

			if (!(ob->carry_chunk >= 0 && m->batch_id == ob->carry_batch &&
				  m->chunk_seq == ob->carry_chunk && m->seq == ob->carry_chunk + ob->carry_seen))
			{
				/* a chunk starts; one seen only in part stays in the outbox */
				reset_carry(ob);
				ob->carry_batch = m->batch_id;
				ob->carry_chunk = m->chunk_seq;
				ob->carry_n = m->chunk_n;
				ob->carry_seen = (int) (m->seq - m->chunk_seq);
				ob->carry_ok = m->seq == m->chunk_seq;
			}
			ob->carry_seen++;
			if (m->state == STM_OUTBOX_DELIVERED)
				ob->carry_delivered++;
			else if (m->state == STM_OUTBOX_TOO_LARGE)
			{
				Refused    *f = palloc(sizeof(Refused));

				f->seq = m->seq;
				f->error = m->error;
				ob->carry_refused = lappend(ob->carry_refused, f);
			}
			else
			{
				ob->carry_ok = false;
				if (!ob->failed)
				{
					ob->failed = true;
					ob->fail_error = m->error;
				}
			}
			if (ob->carry_seen < ob->carry_n)
				continue;
			if (ob->carry_ok)
			{
				DoneChunk  *c = palloc(sizeof(DoneChunk));

				c->batch_id = ob->carry_batch;
				c->chunk_seq = ob->carry_chunk;
				c->delivered = ob->carry_delivered;
				c->refused = ob->carry_refused;
				ob->carry_refused = NIL;	/* the chunk's now */
				chunks = lappend(chunks, c);
				*removed += ob->carry_n;
			}
			reset_carry(ob);
		}
	}
	MemoryContextSwitchTo(old);
	return chunks;
}

/*
 * The rounds at the head that are fully reported: their done chunks leave
 * the outbox, their delivered messages count in their batches' progress
 * rows and the refused ones go to dead_letters; one transaction.  Returns
 * the messages delivered.
 */
static int64
finish_rounds(StmOutboxSink *sink)
{
	StmOutbox  *ob = sink->outbox;
	List	   *done = NIL;
	List	   *chunks;
	int			total = 0;
	int64		delivered = 0;
	int64		removed = 0;
	ListCell   *lc;

	while (ob->rounds != NIL && ((Round *) linitial(ob->rounds))->ndone ==
		   ((Round *) linitial(ob->rounds))->n)
	{
		done = lappend(done, linitial(ob->rounds));
		total += ((Round *) linitial(ob->rounds))->n;
		ob->rounds = list_delete_first(ob->rounds);
	}
	if (done == NIL)
		return 0;

	chunks = done_chunks(ob, done, &removed);
	if (chunks != NIL)
	{
		Relation	rel;
		Relation	idx;
		TupleTableSlot *slot;
		int64		batch = -1;
		int64		batch_rows = 0;
		List	   *dead = NIL;

		StartTransactionCommand();
		PushActiveSnapshot(GetTransactionSnapshot());

		/* the done chunks go; each batch's delivered messages to its progress row */
		rel = table_open(ob->relid, RowExclusiveLock);
		idx = index_open(RelationGetPrimaryKeyIndex(rel), RowExclusiveLock);
		slot = table_slot_create(rel, NULL);
		foreach(lc, chunks)
		{
			DoneChunk  *c = lfirst(lc);

			if (c->batch_id != batch && batch_rows > 0)
			{
				count_in_progress(sink->base.stream_id, batch, "num_delivered_rows", batch_rows);
				batch_rows = 0;
			}
			batch = c->batch_id;
			if (delete_chunk(rel, idx, slot, sink->base.stream_id, c, &dead))
			{
				batch_rows += c->delivered;
				delivered += c->delivered;
			}
		}
		if (batch_rows > 0)
			count_in_progress(sink->base.stream_id, batch, "num_delivered_rows", batch_rows);
		ExecDropSingleTupleTableSlot(slot);
		index_close(idx, RowExclusiveLock);
		table_close(rel, RowExclusiveLock);

		/* refused messages, read from their chunks as these went */
		if (dead != NIL)
			write_dead_letters(sink, dead);
		PopActiveSnapshot();
		CommitTransactionCommand();
		MemoryContextSwitchTo(ob->cxt);
	}

	ob->outbox_rows = Max(0, ob->outbox_rows - removed);
	ob->in_flight -= total;
	foreach(lc, done)
		release_round(ob, (Round *) lfirst(lc));
	list_free(done);
	foreach(lc, chunks)
		list_free_deep(((DoneChunk *) lfirst(lc))->refused);
	list_free_deep(chunks);
	return delivered;
}

/* Forget the cursor: everything not delivered is sent again from the outbox's first row. */
static void
start_over(StmOutbox *ob)
{
	ob->failed = false;
	ob->have_cursor = false;
	reset_carry(ob);			/* its chunk is sent again, all of it */
}

/*
 * What the stream waits for when the outbox is full, or when nothing was
 * delivered within the transport's timeout (st->waiting).
 */
static void
behind(StmOutboxSink *sink, bool timed_out, int64 delivered, StmSinkStatus *st)
{
	StmOutbox  *ob = sink->outbox;
	bool		stuck = timed_out && delivered == 0 && ob->in_flight > 0;
	StringInfoData buf;

	if (st->error != NULL || !(st->full || stuck))
		return;
	initStringInfo(&buf);
	if (st->full)
		appendStringInfo(&buf, "the %s sink \"%s\" is behind: the outbox holds " INT64_FORMAT
						 " rows of the stream (streaming.outbox_max_rows = %d), the next batch waits",
						 sink->base.routine->display_name, sink->name, ob->outbox_rows,
						 stm_guc_outbox_max_rows);
	if (stuck)
		appendStringInfo(&buf, "%scould not deliver to %s within %s: %s",
						 buf.len ? "; " : "", sink->destination, sink->timeout_setting,
						 sink->transport->last_error(sink));
	if (!st->full)
		appendStringInfo(&buf, "; " INT64_FORMAT " rows wait in the outbox", ob->outbox_rows);
	strlcpy(ob->waiting, buf.data, STM_OUTBOX_TEXT_LEN);
	pfree(buf.data);
	st->waiting = ob->waiting;
}

/*
 * deliver (sink.h): send what the outbox holds, in order, and delete what
 * the transport reported done, until everything is delivered or the
 * transport's timeout passed (busy: until everything is sent or the
 * transport is full, if the outbox is at most half full: the worker's next
 * batch runs while the transport sends); outside any transaction.
 * Messages still in flight then stay with the transport (they are not
 * sent twice) and the next call goes on waiting for them.  After a
 * failure, once nothing is in flight, the next call starts again from the
 * outbox's first row.
 */
StmSinkStatus
stm_outbox_deliver(StmSink *base, bool busy)
{
	StmOutboxSink *sink = (StmOutboxSink *) base;
	StmOutbox  *ob = sink->outbox;
	const StmOutboxTransport *tr = sink->transport;
	int			timeout_ms = *sink->timeout_ms;
	StmSinkStatus st = {0, false, NULL, NULL};
	TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
	int64		delivered = 0;
	bool		more = true;
	bool		timed_out = false;
	MemoryContext old = MemoryContextSwitchTo(ob->cxt);

	if (ob->outbox_rows == 0 && ob->in_flight == 0)
	{
		MemoryContextSwitchTo(old);
		return st;				/* nothing waits */
	}
	if (!ob->connected)
	{
		/*
		 * what is in flight is tracked in OutMsgs (at most a quarter of
		 * batch_memory for them), and the transport's client holds it too
		 */
		ob->max_in_flight = Min(Max((int64) stm_guc_batch_memory_kb * 1024 / 4 / (int64) sizeof(OutMsg),
									2 * ROUND_ROWS), IN_FLIGHT_ROWS);
		StartTransactionCommand();
		tr->connect(sink, ob->max_in_flight);
		CommitTransactionCommand();
		MemoryContextSwitchTo(ob->cxt);
		ob->connected = true;
		ob->destination_ok = false;
	}
	if (ob->in_flight == 0 && !ob->destination_ok && !check_destination(sink, timeout_ms, &st))
	{
		st.pending = ob->outbox_rows;
		st.full = ob->outbox_rows >= stm_guc_outbox_max_rows;
		MemoryContextSwitchTo(old);
		return st;
	}
	for (;;)
	{
		tr->poll(sink, 0);
		if (tr->fatal_error(sink, ob->error, STM_OUTBOX_TEXT_LEN))
		{
			/* the client cannot go on: a new one next time, from the outbox's first row */
			ob->failed = true;
			disconnect(sink);
			delivered += finish_rounds(sink);
			st.error = ob->error;
			start_over(ob);
			break;
		}
		delivered += finish_rounds(sink);
		if (ob->failed && ob->in_flight == 0)
		{
			/* everything not delivered is sent again, in order, after a check of the destination */
			tr->describe_failure(sink, ob->fail_error, ob->error, STM_OUTBOX_TEXT_LEN);
			st.error = ob->error;
			start_over(ob);
			ob->destination_ok = false;
			break;
		}

		/*
		 * send while the transport has room: the last batch's messages
		 * from the stage, then the outbox's (never both at once: the stage
		 * is next in outbox order)
		 */
		ob->queue_full = false;
		if (ob->stage_ready)
			produce_stage(sink);
		if (!ob->stage_ready && !ob->failed && more && !ob->queue_full &&
			ob->outbox_rows > produced_rows(ob))
		{
			if (ob->in_flight + ROUND_ROWS + CHUNK_MAX_MSGS > ob->max_in_flight)
				ob->queue_full = true;
			else
				more = produce_round(sink, ROUND_ROWS);
		}
		if (ob->in_flight == 0 && (!more || ob->outbox_rows == 0))
			break;				/* all delivered */

		/*
		 * busy, and the next batch has room in the outbox: it runs while
		 * the transport sends what it holds; the rest is sent after it
		 */
		if (busy && !ob->failed && ob->outbox_rows <= stm_guc_outbox_max_rows / 2 &&
			(ob->queue_full || !more || ob->outbox_rows <= produced_rows(ob)))
			break;
		if (GetCurrentTimestamp() >= deadline)
		{
			timed_out = true;
			break;
		}
		if (!PostmasterIsAlive())
			proc_exit(1);
		tr->poll(sink, POLL_MS);
	}
	st.pending = ob->outbox_rows;
	st.full = ob->outbox_rows >= stm_guc_outbox_max_rows;
	behind(sink, timed_out, delivered, &st);
	MemoryContextSwitchTo(old);
	return st;
}
