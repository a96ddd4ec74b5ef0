/*
 * dedup.c: dedup_keys (SPEC 3.3), Spark's dropDuplicates and
 * dropDuplicatesWithinWatermark, applied to source rows before the query.
 *
 * The keys seen are kept in streaming.dedup_<id> (key: the key columns in
 * their binary send format; expires_at: when the watermark may forget the
 * key, NULL for never), written in the batch's transaction.  A chunk of
 * records is checked against the table with one query, which also finds
 * the keys of the batch's earlier chunks (each chunk writes its new keys
 * with one statement, not read-only: the next chunk's query sees them): the
 * keys in memory are a chunk's, in a context reset for each chunk, so a
 * batch's dedup memory does not grow with its keys (SPEC 7).
 *
 * Expiry: with a watermark, rows with event time <= watermark are late and
 * dropped; a key expires at its event time when the event-time column is
 * one of the keys (dropDuplicates), at its first event time + delay with
 * dedup_within_watermark, and never otherwise.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "dedup.h"
#include "statetable.h"

struct StmDedup
{
	int32		stream_id;
	char	   *table;
	int			nkeys;
	int		   *key_atts;
	FmgrInfo   *send;
	int			event_time_att; /* -1: no watermark */
	TimestampTz watermark;
	bool		expire_at_event_time;	/* the event time is a key */
	bool		within;			/* dedup_within_watermark */
	int64		delay_us;
	MemoryContext cxt;			/* the chunk's keys, reset per chunk */
	int64		num_dup;
	int64		num_late;
	int64		rows_added;		/* keys inserted less expired */
	StmLateRows *keep_late;		/* late_rows => 'keep', else NULL */
};

char *
stm_dedup_table(int32 stream_id)
{
	return psprintf("streaming.%s", quote_identifier(psprintf("dedup_%d", stream_id)));
}

/* The table of seen keys and when they may be forgotten. */
void
stm_dedup_create(int32 stream_id, Oid owner)
{
	stm_statetable_create(psprintf("dedup_%d", stream_id),
						  "key bytea PRIMARY KEY, expires_at timestamptz", "expires_at", NULL, owner);
}

/*
 * key_atts: the key columns in the source row; event_time_att: the
 * event-time column when the stream has a watermark, else -1.
 */
StmDedup *
stm_dedup_begin(int32 stream_id, TupleDesc source, List *key_names,
				int event_time_att, TimestampTz watermark, bool within, int64 delay_us,
				StmLateRows *keep_late)
{
	StmDedup   *d = palloc0(sizeof(StmDedup));
	ListCell   *lc;
	int			n = 0;

	d->stream_id = stream_id;
	d->keep_late = keep_late;
	d->table = stm_dedup_table(stream_id);
	d->nkeys = list_length(key_names);
	d->key_atts = palloc(sizeof(int) * d->nkeys);
	d->send = palloc(sizeof(FmgrInfo) * d->nkeys);
	d->event_time_att = event_time_att;
	d->watermark = watermark;
	d->within = within;
	d->delay_us = delay_us;
	foreach(lc, key_names)
	{
		int			att = -1;
		Oid			sendfn;
		bool		varlena;

		for (int a = 0; a < source->natts; a++)
			if (strcmp(NameStr(TupleDescAttr(source, a)->attname), lfirst(lc)) == 0)
				att = a;
		if (att < 0)
			ereport(ERROR,
					(errcode(ERRCODE_UNDEFINED_COLUMN),
					 errmsg("dedup key \"%s\" is not a column of the source", (char *) lfirst(lc))));
		d->key_atts[n] = att;
		if (att == event_time_att)
			d->expire_at_event_time = true;
		getTypeBinaryOutputInfo(TupleDescAttr(source, att)->atttypid, &sendfn, &varlena);
		fmgr_info(sendfn, &d->send[n]);
		n++;
	}
	d->cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming dedup",
								   ALLOCSET_DEFAULT_SIZES);
	return d;
}

static bytea *
row_key(StmDedup *d, Datum *values, bool *nulls)
{
	StringInfoData buf;

	stm_key_init(&buf);
	for (int k = 0; k < d->nkeys; k++)
		stm_key_append(&buf, &d->send[k], values[d->key_atts[k]], nulls[d->key_atts[k]]);
	return stm_key_finish(&buf);
}

/* A key of the chunk: its first row, and whether an earlier chunk or batch stored it. */
typedef struct ChunkKey
{
	bytea	   *key;
	int			first;
	bool		stored;
} ChunkKey;

/*
 * Mark in drop[] the rows of a chunk that are late or duplicates (of this
 * chunk, of earlier ones or of earlier batches); write the others' keys.
 * Set-based: repeats within the chunk are found in memory, then one query
 * finds which of its distinct keys are stored and one statement writes the
 * new ones (a statement per row cost ~30 us a key).
 */
void
stm_dedup_chunk(StmDedup *d, int n, Datum **values, bool **nulls, bool *drop)
{
	MemoryContext old;
	ChunkKey  **uniq;
	Datum	   *key_datums;
	Datum	   *exp_datums;
	bool	   *exp_nulls;
	int			nuniq = 0;
	int			nnew = 0;
	HTAB	   *seen;
	StmCatalogScope scope;
	bool		expires = d->event_time_att >= 0 && (d->within || d->expire_at_event_time);

	MemoryContextReset(d->cxt);
	old = MemoryContextSwitchTo(d->cxt);
	uniq = palloc(sizeof(ChunkKey *) * n);
	key_datums = palloc(sizeof(Datum) * n);
	seen = stm_keyhash_create("streaming dedup keys", sizeof(ChunkKey), d->cxt);

	/* late rows, and repeats within the chunk: the first in source order wins */
	for (int i = 0; i < n; i++)
	{
		bytea	   *key;
		ChunkKey   *e;
		bool		found;

		if (drop[i])
			continue;
		if (d->event_time_att >= 0 &&
			DatumGetTimestampTz(values[i][d->event_time_att]) <= d->watermark)
		{
			drop[i] = true;
			d->num_late++;
			if (d->keep_late)
				stm_late_row_keep(d->keep_late, values[i], nulls[i],
								  d->event_time_att);
			continue;
		}
		key = row_key(d, values[i], nulls[i]);
		e = hash_search(seen, &key, HASH_ENTER, &found);
		if (found)
		{
			drop[i] = true;
			d->num_dup++;
			continue;
		}
		e->first = i;
		e->stored = false;
		uniq[nuniq] = e;
		key_datums[nuniq++] = PointerGetDatum(key);
	}
	if (nuniq == 0)
	{
		MemoryContextSwitchTo(old);
		return;
	}

	scope = stm_catalog_begin();
	SPI_connect();
	{
		/*
		 * Which of them earlier chunks and batches saw: one query, by the
		 * primary key.  The table grows within a batch with no statistics,
		 * and the planner then takes a (hashed) seq scan for a chunk's
		 * thousand keys, a scan of every key kept per chunk: EXPLAIN showed
		 * 70 ms against 2 ms by the index at 300k keys.
		 */
		Oid			argtype = BYTEAARRAYOID;
		Datum		arg = PointerGetDatum(construct_array(key_datums, nuniq, BYTEAOID, -1, false,
														  TYPALIGN_INT));
		int			nest = NewGUCNestLevel();

		(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("max_parallel_workers_per_gather", "0", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		if (SPI_execute_with_args(psprintf("SELECT key FROM %s WHERE key = ANY ($1)", d->table),
								  1, &argtype, &arg, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the dedup table of stream %d", d->stream_id);
		AtEOXact_GUC(true, nest);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			bytea	   *k = DatumGetByteaPP(SPI_getbinval(SPI_tuptable->vals[r],
														  SPI_tuptable->tupdesc, 1, &isnull));
			ChunkKey   *e = hash_search(seen, &k, HASH_FIND, NULL);

			if (e)
				e->stored = true;
		}
	}

	/* the new keys, with when they may be forgotten: one statement */
	exp_datums = palloc(sizeof(Datum) * nuniq);
	exp_nulls = palloc(sizeof(bool) * nuniq);
	for (int u = 0; u < nuniq; u++)
	{
		int			i = uniq[u]->first;

		if (uniq[u]->stored)
		{
			drop[i] = true;
			d->num_dup++;
			continue;
		}
		key_datums[nnew] = PointerGetDatum(uniq[u]->key);
		exp_nulls[nnew] = !expires;
		exp_datums[nnew] = (Datum) 0;
		if (expires)
		{
			TimestampTz ts = DatumGetTimestampTz(values[i][d->event_time_att]);

			exp_datums[nnew] = TimestampTzGetDatum(d->within ? ts + d->delay_us : ts);
		}
		nnew++;
	}
	if (nnew > 0)
	{
		Oid			types[2] = {BYTEAARRAYOID, TIMESTAMPTZARRAYOID};
		Datum		args[2];
		int			dims[1] = {nnew};
		int			lbs[1] = {1};

		args[0] = PointerGetDatum(construct_array(key_datums, nnew, BYTEAOID, -1, false,
												  TYPALIGN_INT));
		args[1] = PointerGetDatum(construct_md_array(exp_datums, exp_nulls, 1, dims, lbs,
													 TIMESTAMPTZOID, sizeof(TimestampTz),
													 FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
		if (SPI_execute_with_args(psprintf("INSERT INTO %s (key, expires_at) "
										   "SELECT * FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2))", d->table),
								  2, types, args, NULL, false, 0) != SPI_OK_INSERT ||
			SPI_processed != (uint64) nnew)
			elog(ERROR, "could not write the dedup table of stream %d", d->stream_id);
		d->rows_added += nnew;
	}
	SPI_finish();
	stm_catalog_end(scope);
	MemoryContextSwitchTo(old);
}

/* Forget the keys the watermark has passed; report the counters and the keys kept. */
void
stm_dedup_finish(StmDedup *d, Jsonb *stored_rows, StringInfo rows_json,
				 int64 *num_dup, int64 *num_late, int64 *num_state)
{
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (d->event_time_att >= 0)
	{
		Oid			type = TIMESTAMPTZOID;
		Datum		wm = TimestampTzGetDatum(d->watermark);

		if (SPI_execute_with_args(psprintf("DELETE FROM %s WHERE expires_at <= $1", d->table),
								  1, &type, &wm, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not expire the dedup keys of stream %d", d->stream_id);
		d->rows_added -= SPI_processed;
	}
	{
		int64		prev = 0;
		bool		known = stm_statetable_stored_rows(stored_rows, d->table, &prev);

		*num_state = stm_statetable_rows_after(d->table, known, prev, d->rows_added);
		stm_statetable_store_rows(rows_json, d->table, *num_state);
	}
	SPI_finish();
	stm_catalog_end(scope);
	*num_dup = d->num_dup;
	*num_late = d->num_late;
	MemoryContextDelete(d->cxt);
}
