/*
 * source.h: what a stream reads from, as a struct of callbacks.
 *
 * A source kind is one file (source_<kind>.c) holding a const
 * StmSourceRoutine, as PostgreSQL's table access methods and foreign data
 * wrappers are made (tableam.h, fdwapi.h), registered by _PG_init.  The batch driver (batch.c), the
 * SQL functions and the views go through these callbacks only, so they never
 * name a source kind.  A kind keeps its own state in a struct of its own
 * whose first member is StmSource, private to its .c file.
 *
 * One batch, as batch.c drives it (see src/README.md):
 *
 *     open                once per runtime (a worker's life, a run_batch);
 *                         the source lives in the memory context it was
 *                         opened in, and goes away with it
 *     plan                fix the batch's bounds from the stored positions
 *     positions_json      the bounds, for progress
 *     fetch               hand the records within the bounds, in chunks
 *       fill_metadata     a record's metadata columns
 *       position_json     a row's position (dead letters, late rows, errors)
 *     save_positions      the new positions, in the batch's transaction
 *     after_commit        clean-up that must wait for the commit (optional)
 *
 * and, outside batches, validate and metadata_columns (create time),
 * available and reached (process_available), reset_positions (reset).
 *
 * Positions are the source's to store, through the positions service
 * (positions.h: streaming.positions, one row per part of the source, of
 * any kind) or in a table of its own, and always in the batch's own
 * transaction: that is what makes a batch exactly-once.
 */
#ifndef STM_SOURCE_H
#define STM_SOURCE_H

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "catalog.h"
#include "parse.h"

typedef struct StmSourceRoutine StmSourceRoutine;

/* What to do with a record that cannot be parsed (SPEC 5). */
typedef enum StmBadRecordPolicy
{
	STM_BAD_RECORD_DEAD_LETTER,
	STM_BAD_RECORD_SKIP,
	STM_BAD_RECORD_FAIL
} StmBadRecordPolicy;

/* The part of every open source that the batch reads. */
typedef struct StmSource
{
	const StmSourceRoutine *routine;
	char	   *name;			/* the source's name */
	Oid			owner;			/* the source's owner */
	Oid			stream_owner;	/* the stream it runs for (InvalidOid: none) */
	Jsonb	   *options;		/* as stored in streaming.sources */
	StmFormat	format;			/* how record payloads are parsed */
	StmEnvelope envelope;		/* what wraps a record's row (debezium) */
	bool		key_avro;		/* key_format avro: kafka_key_avro */
	struct StmAvroReader *avro; /* format or key_format avro: the registry and
								 * the schemas it gave (avro.c), the runtime's */
	bool		has_columns;	/* declared columns (else one value column) */
	char		csv_delimiter;
	StmBadRecordPolicy on_bad_record;
	int			nmeta;			/* metadata columns after the declared ones */
	bool		bounded;		/* available_now: only what the first plan saw */
	bool		low_latency;	/* trigger continuous: fetches return at the first
								 * record, not when a fetch would be cheapest */
	char	   *problem;		/* set by plan: what it could not read and why (source_error), or NULL */
	bool		unreadable;		/* set by plan with problem: no part of the source can be read
								 * now (status 'waiting', SPEC 4); a part held back is not */
	bool		plan_only;		/* parallel helpers fetch (parallel.c): plan, never read ahead */
} StmSource;

/*
 * One record a source hands to the batch.  Most sources give the payload
 * only, and the batch parses it as the source's format says.  A source that
 * splits records itself (the file source reads CSV with COPY's parser) also
 * gives the fields, which the batch then converts as they are; a record the
 * source could not read at all carries the error that makes it bad.  data
 * is still the raw record (dead letters keep it).  Sources that use neither
 * leave fields and error NULL (palloc0 the records).
 */
typedef struct StmRecord
{
	const char *data;			/* the payload; NULL when there is none */
	int			len;
	const char *key;			/* the record's key (Kafka), for key_format; NULL: none */
	int			key_len;
	void	   *opaque;			/* the source's own (a message, a line) */
	char	  **fields;			/* split already: nfields values (NULL: SQL NULL) */
	int			nfields;
	ErrorData  *error;			/* unreadable: the record is bad with this error */
	const struct StmRecordDigest *whole;	/* data is only the record's start: all of it */
} StmRecord;

/* A record a source could not keep whole, as dead letters describe it (SPEC 5). */
typedef struct StmRecordDigest
{
	int64		length;
	uint8		sha256[32];
} StmRecordDigest;

/* The batch's function that takes each chunk of records from fetch. */
typedef void (*StmChunkFn) (void *arg, StmRecord *records, int n);

/* What plan needs to know of the stream. */
typedef struct StmPlanContext
{
	int32		stream_id;
	bool		initialized;	/* an earlier plan fixed the starting positions */
	/* when the last batch started: stm_plan_last_trigger (one query, asked only when needed) */
	TimestampTz last_trigger_since; /* never before this (the runtime's start) */
	bool		has_last_trigger;
	TimestampTz last_trigger;
	/* streaming.stream_defs.source_started_at, from the stream's row the batch locked */
	bool		has_source_started_at;
	TimestampTz source_started_at;
	TimestampTz batch_start;	/* when this batch started (progress.started_at) */
	int64		max_records;	/* read at most this many records (the sink's
								 * room, StmSinkRoutine.capacity); -1: no limit */
	int			chunk_size;		/* the batch's: fetch hands fn at most this many
								 * records at once (a kind may cut a chunk
								 * shorter, never longer) */
} StmPlanContext;

/* A metadata column of a source's view. */
typedef struct StmMetaColumn
{
	const char *name;
	const char *type;			/* qualified type name, as in CAST(NULL AS type) */
} StmMetaColumn;

struct StmSourceRoutine
{
	const char *kind;			/* as in streaming.sources.kind */
	const char *display_name;	/* the kind in messages */

	/* ---- at create time: required ---- */

	/*
	 * Check the options a create function gathered (all its arguments by
	 * name, NULLs left out) for the role creating the source, and return
	 * them as they are to be stored (keywords normalised).  Errors name the
	 * argument and what is allowed.
	 */
	Jsonb	   *(*validate) (Jsonb *options, Oid role);

	/*
	 * The metadata columns, after the declared ones (the record's topic,
	 * file, offset or line); they are reserved as names of declared columns.
	 */
	List	   *(*metadata_columns) (Jsonb *options);

	/* ---- at create time: optional ---- */

	/*
	 * Once the source is created, with its stored options: try what they
	 * name (brokers, topics) and WARN about what cannot be reached or is
	 * missing now; never an error, since that may change.
	 */
	void		(*probe) (const char *name, Jsonb *options);

	/* ---- batches: required ---- */

	/*
	 * Make the source's state, in the current memory context (it dies with
	 * it), with base filled in from the catalog row; returns the kind's own
	 * struct, whose first member is a copy of *base.  Every stored option is
	 * checked again here, for the source's and the stream's owners.
	 */
	StmSource  *(*open) (StmSource *base, bool for_batches);

	/*
	 * Fix the next batch's bounds from the stored positions; returns how
	 * many records it covers (an upper bound is fine), 0 when there is
	 * nothing (or not yet enough) to read.  "Now", for a source whose
	 * records are due by the clock, is ctx->batch_start.  The bounds hold at
	 * most ctx->max_records records (when it is not -1), exactly.
	 */
	int64		(*plan) (StmSource *src, StmPlanContext *ctx);

	/* The batch's start or end positions, as progress shows them (jsonb text). */
	char	   *(*positions_json) (StmSource *src, bool end);

	/*
	 * Read exactly what plan bounded, handing chunks of records to fn (also
	 * where a chunk's records stay valid: until fn returns), of at most the
	 * plan's ctx->chunk_size records (a helper's: set_share_bounds's, whose
	 * text begins with it, stm_source_share_begin).  Errors when the
	 * source cannot be read are raised with a class 08 SQLSTATE: the stream
	 * then waits and retries.
	 */
	void		(*fetch) (StmSource *src, StmChunkFn fn, void *arg);

	/* A record's metadata columns (src->nmeta values). */
	void		(*fill_metadata) (StmSource *src, StmRecord *rec, Datum *values, bool *nulls);

	/*
	 * A row's position as a JSON object, from its metadata columns:
	 * where the record can be found again, in the source's own terms; used
	 * for dead letters, late rows and error messages.
	 */
	void		(*position_json) (StmSource *src, const Datum *meta, const bool *meta_nulls,
								  StringInfo out);

	/* Write the positions at the batch's end, in the batch's transaction. */
	void		(*save_positions) (StmSource *src, int32 stream_id, int64 batch_id);

	/* ---- optional: set the pointer to NULL if not provided ---- */

	/*
	 * When plan found nothing to read: write what must be kept anyway (where
	 * the stream began reading, parts that appeared), in the transaction of
	 * that empty plan.
	 */
	void		(*save_idle_positions) (StmSource *src, int32 stream_id);

	/* Data lost since the last batch (SPEC 2.1 fail_on_data_loss), as a JSON array, or NULL. */
	char	   *(*data_loss_json) (StmSource *src);

	/*
	 * process_available: what the source holds now (opaque), or problem
	 * set when it cannot be read whole now (the caller asks again until its
	 * timeout); and whether the stream's committed positions have
	 * reached it (read in a fresh snapshot, as the extension's owner).
	 */
	void	   *(*available) (StmSource *src, int32 stream_id);
	bool		(*reached) (StmSource *src, int32 stream_id, void *available);

	/*
	 * Work that must wait for the batch's commit (removing what was read),
	 * called outside any transaction: it starts its own if it needs one.
	 */
	void		(*after_commit) (StmSource *src, int32 stream_id);

	/*
	 * The idle worker's sleep, when a plan found nothing: a descriptor that
	 * becomes readable when records may have arrived (the worker sleeps on
	 * it with its latch, at most streaming.naptime), or -1 (it sleeps for
	 * streaming.naptime); and ready, asked before each such sleep: have
	 * records arrived since the last plan (plan again at once)?  ready
	 * consumes the descriptor's wake-ups.  Both optional (NULL: naptime).
	 */
	int			(*wait_fd) (StmSource *src);
	bool		(*ready) (StmSource *src);

	/*
	 * streaming.reset(): forget the stream's positions that the kind keeps
	 * outside streaming.positions (which reset empties itself), in reset's
	 * transaction.  Called without opening the source.
	 */
	void		(*reset_positions) (int32 stream_id);

	/*
	 * Parallel helpers (parallel.c; optional, NULL: the kind cannot be read
	 * by helpers).  share_bounds, in the leader after plan: share's part
	 * (of nshares) of the batch's bounds, as a text only the kind reads;
	 * every part of the source is in exactly one share, and a part stays in
	 * the same share from batch to batch while the parts stay the same (a
	 * Kafka partition keeps its helper's consumer; a file or rate source,
	 * with no client to keep, splits each batch afresh: ordered_parts).  The
	 * text begins with the plan's chunk size (stm_source_share_begin, read
	 * back by stm_source_share_chunk_size): a helper reads in the batch's
	 * chunks, though its source never plans.
	 * set_share_bounds, in a helper: read exactly those bounds with the
	 * next fetch, and nothing else (the helper's source is open as the
	 * leader's, never plans and never saves positions).
	 * share_parts, in the leader after plan: how many shares the source's
	 * parts can keep busy (partitions read, the batch's files), which bounds
	 * the automatic number of helpers (parallel_workers NULL); none: no
	 * automatic helpers (the rate source).
	 */
	char	   *(*share_bounds) (StmSource *src, int share, int nshares);
	void		(*set_share_bounds) (StmSource *src, const char *bounds);
	int			(*share_parts) (StmSource *src);

	/*
	 * The source is one sequence read from start to end (the file source's
	 * files, the rate source's values): which row of a key comes first
	 * (dedup_keys) then spans parts.  Such a kind's share_bounds must make
	 * share s of n the s-th consecutive run of the batch (files, values),
	 * so that the shares read one after another are the batch in its
	 * order: the leader then takes them in that order for dedup_keys
	 * (batch.c fetch_by_helpers).  false (Kafka): rows are ordered within a
	 * part only, and the shares are taken as they come.
	 */
	bool		ordered_parts;

	/* Give resources back before the memory context goes (else it does). */
	void		(*close) (StmSource *src);
};

extern void stm_source_register(const StmSourceRoutine *routine);
extern const StmSourceRoutine *stm_source_routine(const char *kind);
extern StmSource *stm_source_open(StmSourceDef *def, Oid stream_owner, bool for_batches);
extern void stm_source_close(StmSource *src);
extern bool stm_source_wait(StmSource **sources, int n, long timeout_ms);
extern bool stm_source_quiet(StmSource **sources, int n);
extern List *stm_source_declared_columns(Jsonb *options, const StmSourceRoutine *routine);
extern char *stm_source_position(StmSource *src, const Datum *meta, const bool *meta_nulls);
extern void stm_source_require_options(Jsonb *options, const char *const *keys);
extern void stm_source_parse(StmParser *parser, const StmRecord *rec, Datum *values, bool *nulls);
extern void stm_source_check_positive(Jsonb *options, const char *key);
extern void stm_source_check_positive_interval(Jsonb *options, const char *key);
extern void stm_source_check_columns(const char *format, bool has_columns);
extern void stm_source_check_on_bad_record(const char *on_bad_record);
extern AttrNumber stm_source_change_column(Oid view);
extern void stm_source_share_begin(StringInfo buf, int chunk_size);
extern const char *stm_source_share_chunk_size(const char *bounds, int *chunk_size);
extern void stm_source_note_wait(int64 us);
extern int64 stm_source_waited_us(void);
extern int64 stm_thread_cpu_us(void);
extern int64 stm_thread_runq_us(void);

/* api_source.c: the create function of every kind */
extern Datum stm_api_create_source(FunctionCallInfo fcinfo, const StmSourceRoutine *routine);

/* source.c: when the stream's last batch started, read when a plan first asks */
extern TimestampTz stm_plan_last_trigger(StmPlanContext *ctx);

#endif
