/*
 * dedup.c: dedup_keys (SPEC 3.3), Spark's dropDuplicates and
 * dropDuplicatesWithinWatermark, applied to source rows before the query.
 *
 * The keys seen are kept in streaming.dedup_<id> (key: the key columns in
 * their binary send format; expires_at: when the watermark may forget the
 * key, NULL for never), written in the batch's transaction.  A chunk of
 * records is checked against the table with one query.
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
#include "utils/hsearch.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "dedup.h"

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
	HTAB	   *seen;			/* keys of this batch */
	MemoryContext cxt;
	int64		num_dup;
	int64		num_late;
};

char *
stm_dedup_table(int32 stream_id)
{
	return psprintf("streaming.%s", quote_identifier(psprintf("dedup_%d", stream_id)));
}

/* The table of seen keys, made as the state tables are (see aggstate.c). */
void
stm_dedup_create(int32 stream_id, Oid owner)
{
	Oid			save_userid;
	int			save_sec;
	int			nest;
	char	   *table = stm_dedup_table(stream_id);
	ObjectAddress table_addr;
	ObjectAddress ext_addr;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (SPI_execute(psprintf("CREATE TABLE %s (key bytea PRIMARY KEY, expires_at timestamptz)", table),
					false, 0) != SPI_OK_UTILITY ||
		SPI_execute(psprintf("CREATE INDEX ON %s (expires_at)", table), false, 0) != SPI_OK_UTILITY ||
		SPI_execute(psprintf("ALTER TABLE %s OWNER TO %s", table,
							 quote_identifier(GetUserNameFromId(owner, false))),
					false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create the dedup table of stream %d", stream_id);
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
	SetUserIdAndSecContext(save_userid, save_sec);
	CommandCounterIncrement();
	ObjectAddressSet(table_addr, RelationRelationId,
					 get_relname_relid(psprintf("dedup_%d", stream_id),
									   get_namespace_oid("streaming", false)));
	ObjectAddressSet(ext_addr, ExtensionRelationId, get_extension_oid("streaming", false));
	recordDependencyOn(&table_addr, &ext_addr, DEPENDENCY_NORMAL);
}

static uint32
key_hash(const void *key, Size keysize)
{
	const bytea *k = *(bytea *const *) key;

	return DatumGetUInt32(hash_any((const unsigned char *) VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k)));
}

static int
key_match(const void *key1, const void *key2, Size keysize)
{
	const bytea *a = *(bytea *const *) key1;
	const bytea *b = *(bytea *const *) key2;

	if (VARSIZE_ANY_EXHDR(a) != VARSIZE_ANY_EXHDR(b))
		return 1;
	return memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a));
}

/*
 * key_atts: the key columns in the source row; event_time_att: the
 * event-time column when the stream has a watermark, else -1.
 */
StmDedup *
stm_dedup_begin(int32 stream_id, TupleDesc source, List *key_names,
				int event_time_att, TimestampTz watermark, bool within, int64 delay_us)
{
	StmDedup   *d = palloc0(sizeof(StmDedup));
	HASHCTL		ctl;
	ListCell   *lc;
	int			n = 0;

	d->stream_id = stream_id;
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
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(bytea *);
	ctl.entrysize = sizeof(bytea *);
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = d->cxt;
	d->seen = hash_create("streaming dedup keys", 1024, &ctl,
						  HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
	return d;
}

static bytea *
row_key(StmDedup *d, Datum *values, bool *nulls)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoSpaces(&buf, VARHDRSZ);
	for (int k = 0; k < d->nkeys; k++)
	{
		int			att = d->key_atts[k];
		int32		len = -1;

		if (nulls[att])
			appendBinaryStringInfo(&buf, (char *) &len, sizeof(len));
		else
		{
			bytea	   *b = SendFunctionCall(&d->send[k], values[att]);

			len = VARSIZE(b) - VARHDRSZ;
			appendBinaryStringInfo(&buf, (char *) &len, sizeof(len));
			appendBinaryStringInfo(&buf, VARDATA(b), len);
		}
	}
	SET_VARSIZE(buf.data, buf.len);
	return (bytea *) buf.data;
}

/*
 * Mark in drop[] the rows of a chunk that are late or duplicates (of this
 * batch or of earlier ones); remember the others' keys.
 */
void
stm_dedup_chunk(StmDedup *d, int n, Datum **values, bool **nulls, bool *drop)
{
	MemoryContext old = MemoryContextSwitchTo(d->cxt);
	bytea	  **keys = palloc(sizeof(bytea *) * n);
	Datum	   *key_datums = palloc(sizeof(Datum) * n);
	int			nkeys = 0;
	ArrayType  *arr;
	HTAB	   *known;
	HASHCTL		ctl;
	Oid			argtype = BYTEAARRAYOID;
	Oid			types[2] = {BYTEAOID, TIMESTAMPTZOID};
	Datum		arg;
	SPIPlanPtr	insert;
	int			nest;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(bytea *);
	ctl.entrysize = sizeof(bytea *);
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = CurrentMemoryContext;
	known = hash_create("streaming dedup known", 256, &ctl,
						HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);

	for (int i = 0; i < n; i++)
	{
		keys[i] = NULL;
		if (drop[i])
			continue;
		if (d->event_time_att >= 0 &&
			DatumGetTimestampTz(values[i][d->event_time_att]) <= d->watermark)
		{
			drop[i] = true;
			d->num_late++;
			continue;
		}
		keys[i] = row_key(d, values[i], nulls[i]);
		key_datums[nkeys++] = PointerGetDatum(keys[i]);
	}

	/* which of the chunk's keys earlier batches saw: one query */
	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (nkeys > 0)
	{
		arr = construct_array(key_datums, nkeys, BYTEAOID, -1, false, TYPALIGN_INT);
		arg = PointerGetDatum(arr);
		if (SPI_execute_with_args(psprintf("SELECT key FROM %s WHERE key = ANY ($1)", d->table),
								  1, &argtype, &arg, NULL, false, 0) != SPI_OK_SELECT)
			elog(ERROR, "could not read the dedup table of stream %d", d->stream_id);
		for (uint64 r = 0; r < SPI_processed; r++)
		{
			bool		isnull;
			bytea	   *k = DatumGetByteaPCopy(SPI_getbinval(SPI_tuptable->vals[r],
															 SPI_tuptable->tupdesc, 1, &isnull));

			(void) hash_search(known, &k, HASH_ENTER, NULL);
		}
	}

	insert = SPI_prepare(psprintf("INSERT INTO %s VALUES ($1, $2)", d->table), 2, types);
	if (insert == NULL)
		elog(ERROR, "could not prepare the dedup insert");
	for (int i = 0; i < n; i++)
	{
		bool		found;
		Datum		vals[2];
		char		nulls2[2] = {' ', 'n'};

		if (keys[i] == NULL)
			continue;
		if (hash_search(known, &keys[i], HASH_FIND, NULL) != NULL)
		{
			drop[i] = true;
			d->num_dup++;
			continue;
		}
		(void) hash_search(d->seen, &keys[i], HASH_ENTER, &found);
		if (found)
		{
			drop[i] = true;
			d->num_dup++;
			continue;
		}
		/* a new key: remember it, with when it may be forgotten */
		vals[0] = PointerGetDatum(keys[i]);
		if (d->event_time_att >= 0 && (d->within || d->expire_at_event_time))
		{
			TimestampTz ts = DatumGetTimestampTz(values[i][d->event_time_att]);

			vals[1] = TimestampTzGetDatum(d->within ? ts + d->delay_us : ts);
			nulls2[1] = ' ';
		}
		if (SPI_execute_plan(insert, vals, nulls2, false, 0) != SPI_OK_INSERT)
			elog(ERROR, "could not write the dedup table of stream %d", d->stream_id);
	}
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
	hash_destroy(known);
	MemoryContextSwitchTo(old);
}

/* Forget the keys the watermark has passed; report the counters. */
void
stm_dedup_finish(StmDedup *d, int64 *num_dup, int64 *num_late)
{
	if (d->event_time_att >= 0)
	{
		Oid			type = TIMESTAMPTZOID;
		Datum		wm = TimestampTzGetDatum(d->watermark);
		int			nest = stm_catalog_pin_search_path();

		SPI_connect();
		if (SPI_execute_with_args(psprintf("DELETE FROM %s WHERE expires_at <= $1", d->table),
								  1, &type, &wm, NULL, false, 0) != SPI_OK_DELETE)
			elog(ERROR, "could not expire the dedup keys of stream %d", d->stream_id);
		SPI_finish();
		stm_catalog_unpin_search_path(nest);
	}
	*num_dup = d->num_dup;
	*num_late = d->num_late;
	MemoryContextDelete(d->cxt);
}
