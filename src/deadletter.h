/*
 * deadletter.h: bad records into streaming.dead_letters (SPEC 5), one
 * writer for every part that sets records aside (the batch, a parallel
 * helper's leader, a sink that delivers after the commit).
 */
#ifndef STM_DEADLETTER_H
#define STM_DEADLETTER_H

#include "postgres.h"

#include "common/sha2.h"

/* dead_letters.raw keeps at most this much of a record; length and SHA-256 describe it all */
#define STM_RAW_KEEP (64 * 1024)

/* A bad record, as dead_letters keeps it. */
typedef struct StmBadRecord
{
	int			sqlerrcode;
	const char *message;
	const char *detail;			/* NULL: none */
	const char *position;		/* JSON text: where the record can be found again */
	const char *raw;			/* the record's first bytes; NULL: no payload */
	int			raw_len;		/* of raw (at most STM_RAW_KEEP are kept) */
	int64		whole_len;		/* the whole record's length; -1: unknown (no payload) */
	const uint8 *sha256;		/* of the whole record; NULL: none */
} StmBadRecord;

extern void stm_deadletter_describe(StmBadRecord *bad, const char *data, int len,
									uint8 sha256[PG_SHA256_DIGEST_LENGTH]);
extern void stm_deadletter_write(int32 stream_id, const StmBadRecord *bad);

#endif
