/*
 * outbox.h: the outbox (SPEC 6.1), the service of every sink whose rows
 * leave PostgreSQL after the commit.
 *
 * A sink kind that delivers this way (the Kafka sink) keeps what is its own
 * (its arguments, how a row becomes a message, and a transport that moves
 * messages) and leaves the rest to the outbox:
 *
 *     batch            the kind encodes each row as a message (key, value)
 *                      and hands it to stm_outbox_write: chunks of
 *                      streaming.outbox_chunks in the batch's transaction,
 *                      within the outbox's bound (capacity), and the last
 *                      batch's chunks kept in memory (the stage)
 *     COMMIT
 *     deliver          rounds of messages in (batch_id, seq) order, the
 *                      stage first, then the outbox after the cursor, given
 *                      to the transport (send) within its in-flight limit;
 *                      its reports (poll -> stm_outbox_report) mark each one
 *                      done, refused as too large, or failed; the chunks
 *                      whose messages are all done are deleted and counted
 *                      in their batches' progress rows, refused messages
 *                      become dead letters (one transaction per round); a
 *                      failure sends everything again from the outbox's
 *                      first row once nothing is in flight; the stream's
 *                      'waiting' and last_error texts
 *     pending, discard what committed batches left, for process_available
 *                      and drop_stream
 *
 * The kind's sink struct starts with StmOutboxSink, and its StmSinkRoutine
 * points capacity, after_commit, deliver, close, pending and discard at the
 * stm_outbox_* functions below.  A message's headers are not stored: a
 * transport that has them makes them from the stream, batch id and seq
 * (the view streaming.outbox shows them so).
 */
#ifndef STM_OUTBOX_H
#define STM_OUTBOX_H

#include "lib/stringinfo.h"

#include "sink.h"

/* a chunk's messages stop growing past this: the row then fits one heap page */
#define STM_OUTBOX_CHUNK_BYTES 7800

/* the room for a status text ('waiting', last_error) */
#define STM_OUTBOX_TEXT_LEN 1024

/*
 * One message: where it is in the outbox, its key and its value (NULL:
 * none, a NULL key or a tombstone).
 */
typedef struct StmOutboxMsg
{
	int64		batch_id;
	int64		seq;
	const char *key;
	int			keylen;
	const char *value;
	int			valuelen;
} StmOutboxMsg;

/* Reads a chunk's messages in order (their key and value). */
typedef struct StmOutboxReader
{
	const char *data;
	int			len;
	int			pos;
} StmOutboxReader;

/* What became of a message given to the transport. */
typedef enum StmOutboxOutcome
{
	STM_OUTBOX_IN_FLIGHT,		/* taken: its report comes later */
	STM_OUTBOX_NO_ROOM,			/* not taken, the transport is full: offered
								 * again later */
	STM_OUTBOX_DELIVERED,		/* the destination has it */
	STM_OUTBOX_TOO_LARGE,		/* refused for its size: a dead letter */
	STM_OUTBOX_FAILED			/* not delivered: it stays in the outbox and
								 * is sent again, in order */
} StmOutboxOutcome;

/* What the transport found of the destination. */
typedef enum StmOutboxCheck
{
	STM_OUTBOX_DEST_OK,
	STM_OUTBOX_DEST_WAIT,		/* not now (out of reach, being made): waiting */
	STM_OUTBOX_DEST_ERROR		/* missing, or refusing us: last_error too */
} StmOutboxCheck;

typedef struct StmOutboxSink StmOutboxSink;
typedef struct StmOutbox StmOutbox;
typedef struct StmOutboxWriter StmOutboxWriter;

/*
 * A transport: how a kind moves messages to their destination.  The
 * outbox calls it from the worker's deliver only (outside any
 * transaction unless said), one message at a time in outbox order, and
 * never from another thread; a transport whose client has threads lets
 * them only record, and reports in poll.  Errors in its texts are its
 * own: an error code is the transport's, the outbox only passes it back.
 */
typedef struct StmOutboxTransport
{
	/*
	 * Make the client, in a transaction (its errors are the stream's):
	 * before the first delivery, and the first one after disconnect.  It
	 * is to hold at most max_in_flight messages at a time.
	 */
	void		(*connect) (StmOutboxSink *sink, int64 max_in_flight);

	/*
	 * Is the destination there, and may we write to it?  Asked before
	 * anything is sent, and again after a failure, within timeout_ms; if
	 * not, text (len bytes) says why.
	 */
	StmOutboxCheck (*check_destination) (StmOutboxSink *sink, int timeout_ms,
										 char *text, size_t len);

	/*
	 * Take one message (its bytes are the caller's: copy them); ref is
	 * what its report gives back.  Returns IN_FLIGHT (a report follows),
	 * NO_ROOM (nothing kept), or an outcome known at once (DELIVERED,
	 * TOO_LARGE, FAILED: no report follows) with *error.
	 */
	StmOutboxOutcome (*send) (StmOutboxSink *sink, const StmOutboxMsg *msg,
							  void *ref, int *error);

	/*
	 * Wait up to timeout_ms (0: not at all) for reports of messages in
	 * flight, handing each one to stm_outbox_report.
	 */
	void		(*poll) (StmOutboxSink *sink, int timeout_ms);

	/*
	 * The client cannot go on: true, and why in text.  The outbox then
	 * disconnects and sends everything again from its first row, with a
	 * new client.
	 */
	bool		(*fatal_error) (StmOutboxSink *sink, char *text, size_t len);

	/*
	 * Drop the client and what it holds (not delivered: its reports may
	 * come during the call, as failed; what is not reported counts as
	 * failed).  Also when the runtime ends, maybe outside a transaction.
	 */
	void		(*disconnect) (StmOutboxSink *sink);

	/* The stream's last_error after a message failed with error. */
	void		(*describe_failure) (StmOutboxSink *sink, int error, char *text, size_t len);

	/* A dead letter's error: a message of bytes bytes refused as too large. */
	char	   *(*describe_refusal) (StmOutboxSink *sink, int64 bytes, int error);

	/* The client's last error, for 'waiting' texts ("no answer" if none). */
	const char *(*last_error) (StmOutboxSink *sink);
} StmOutboxTransport;

/* An open sink that delivers through the outbox; a kind's own struct starts with it. */
struct StmOutboxSink
{
	StmSink		base;			/* first: what batch.c reads */
	const StmOutboxTransport *transport;
	/* set by the kind before stm_outbox_open, for messages */
	const char *name;			/* the sink's (streaming.sinks) */
	const char *destination;	/* Kafka topic "t" of sink "s" */
	const char *position;		/* members of a dead letter's position: "sink": "s", "topic": "t" */
	const char *timeout_setting;	/* the setting that bounds one deliver */
	const int  *timeout_ms;		/* its value, in ms */
	StmOutbox  *outbox;			/* the outbox's own state (outbox.c) */
};

/* the sink: open (after the kind set its fields), then sink.h's callbacks */
extern void stm_outbox_open(StmOutboxSink *sink, StmStreamDef *def, const StmSinkRoutine *routine,
							const StmOutboxTransport *transport);
extern int64 stm_outbox_capacity(StmSink *sink, const char **why);
extern void stm_outbox_after_commit(StmSink *sink);
extern StmSinkStatus stm_outbox_deliver(StmSink *sink, bool busy);
extern void stm_outbox_close(StmSink *sink);
extern int64 stm_outbox_pending(int32 stream_id, int64 limit);
extern void stm_outbox_discard(int32 stream_id);

/* a batch's messages (key or value NULL: none) */
extern StmOutboxWriter *stm_outbox_begin_batch(StmOutboxSink *sink, int64 batch_id, EState *estate);
extern void stm_outbox_write(StmOutboxWriter *w, const char *key, int keylen,
							 const char *value, int valuelen);
extern void stm_outbox_end_batch(StmOutboxWriter *w);

/* the transport's report of a message it took (ref: send's) */
extern void stm_outbox_report(void *ref, StmOutboxOutcome outcome, int error);

/* the chunk format */
extern void stm_outbox_append(StringInfo chunk, const char *key, int keylen,
							  const char *value, int valuelen);
extern void stm_outbox_reader_init(StmOutboxReader *r, const char *data, int len);
extern bool stm_outbox_next(StmOutboxReader *r, StmOutboxMsg *msg);

#endif
