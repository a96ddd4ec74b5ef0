/*
 * outbox.c: how the Kafka sink's messages are stored in the outbox.
 *
 * One row of streaming.outbox_chunks holds a run of a batch's messages
 * (first_seq, nmsgs) in one bytea: for each, the key's length as a 4-byte
 * big-endian integer (-1: no key) and its bytes, then the value's the same
 * way (-1: a tombstone).  A row per message cost more than the table sink's
 * whole row (its heap tuple, primary key entry and delete); a chunk of about
 * one page costs one of each for dozens of messages.  Big-endian, so that a
 * dump restores on any machine.
 *
 * streaming.outbox_messages(bytea) unpacks a chunk for the view
 * streaming.outbox.  It may be called with any bytes, so every length is
 * checked against what is left: a malformed chunk is an error, never a read
 * past its end.
 */
#include "postgres.h"

#include "funcapi.h"
#include "port/pg_bswap.h"
#include "utils/builtins.h"

#include "outbox.h"

PG_FUNCTION_INFO_V1(streaming_outbox_messages);

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
