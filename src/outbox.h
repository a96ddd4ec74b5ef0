/*
 * outbox.h: the Kafka sink's outbox storage (SPEC 6.1).  A batch's messages
 * are stored several to a row of streaming.outbox_chunks, each row a run of
 * consecutive seqs; the view streaming.outbox shows one row per message.
 */
#ifndef STM_OUTBOX_H
#define STM_OUTBOX_H

#include "lib/stringinfo.h"

/* a chunk's messages stop growing past this: the row then fits one heap page */
#define STM_OUTBOX_CHUNK_BYTES 7800

/* One message of a chunk; key or value NULL: none (a NULL key, a tombstone). */
typedef struct StmOutboxMsg
{
	const char *key;
	int			keylen;
	const char *value;
	int			valuelen;
} StmOutboxMsg;

/* Reads a chunk's messages in order. */
typedef struct StmOutboxReader
{
	const char *data;
	int			len;
	int			pos;
} StmOutboxReader;

extern void stm_outbox_append(StringInfo chunk, const char *key, int keylen,
							  const char *value, int valuelen);
extern void stm_outbox_reader_init(StmOutboxReader *r, const char *data, int len);
extern bool stm_outbox_next(StmOutboxReader *r, StmOutboxMsg *msg);

#endif
