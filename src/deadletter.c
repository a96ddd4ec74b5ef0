/*
 * deadletter.c: the one writer of streaming.dead_letters (SPEC 5).
 *
 * A dead letter belongs to its stream by id (the stream's and source's
 * names are taken from its row, so a later stream of the same name sees
 * none of them); it keeps the record's first STM_RAW_KEEP bytes, and the
 * length and SHA-256 of the whole record.  It is written in the caller's
 * transaction (the batch's, or a sink's delivery), as the extension's
 * owner.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/cryptohash.h"
#include "executor/spi.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "deadletter.h"
#include "fault.h"

/*
 * Describe a whole record of len bytes at data (NULL: no payload): its
 * first bytes, its length and its SHA-256 (into sha256, the caller's).
 */
void
stm_deadletter_describe(StmBadRecord *bad, const char *data, int len,
						uint8 sha256[PG_SHA256_DIGEST_LENGTH])
{
	pg_cryptohash_ctx *ctx;

	bad->raw = data;
	bad->raw_len = data ? Min(len, STM_RAW_KEEP) : 0;
	bad->whole_len = data ? len : -1;
	bad->sha256 = NULL;
	if (data == NULL)
		return;
	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, (const uint8 *) data, len) < 0 ||
		pg_cryptohash_final(ctx, sha256, PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not compute the SHA-256 of a record: %s", pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);
	bad->sha256 = sha256;
}

/* bytea of len bytes */
static bytea *
make_bytea(const void *data, int len)
{
	bytea	   *b = palloc(len + VARHDRSZ);

	SET_VARSIZE(b, len + VARHDRSZ);
	if (len > 0)
		memcpy(VARDATA(b), data, len);
	return b;
}

/* A bad record of the stream into streaming.dead_letters, in the current transaction. */
void
stm_deadletter_write(int32 stream_id, const StmBadRecord *bad)
{
	StmSql		q;

	stm_sql_init(&q, "INSERT INTO streaming.dead_letters (stream, source, position, raw, error, "
				 "sqlstate, stream_id, raw_length, raw_sha256) "
				 "SELECT s.name, s.source, :position, :raw, :error, :sqlstate, s.id, "
				 ":raw_length, :raw_sha256 FROM streaming.stream_defs s WHERE s.id = :stream_id");
	stm_sql_int4(&q, "stream_id", stream_id);
	stm_sql_jsonb(&q, "position", bad->position);
	stm_sql_param(&q, "raw", BYTEAOID,
				  bad->raw ? PointerGetDatum(make_bytea(bad->raw, Min(bad->raw_len, STM_RAW_KEEP))) : (Datum) 0,
				  bad->raw == NULL);
	stm_sql_text(&q, "error", bad->detail ? psprintf("%s: %s", bad->message, bad->detail) : bad->message);
	stm_sql_text(&q, "sqlstate", unpack_sql_state(bad->sqlerrcode));
	stm_sql_param(&q, "raw_length", INT8OID, Int64GetDatum(bad->whole_len), bad->sha256 == NULL);
	stm_sql_param(&q, "raw_sha256", BYTEAOID,
				  bad->sha256 ? PointerGetDatum(make_bytea(bad->sha256, PG_SHA256_DIGEST_LENGTH)) : (Datum) 0,
				  bad->sha256 == NULL);
	(void) stm_catalog_run(&q, SPI_OK_INSERT, NULL, NULL);
	STM_FAULT_POINT("after_dead_letter");
}
