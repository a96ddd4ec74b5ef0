/*
 * catalog.h: the streaming.* tables as C structs.
 *
 * Every read and write of the extension's own tables goes through here, with
 * search_path pinned to pg_catalog so that user objects cannot capture the
 * generated SQL.
 */
#ifndef STM_CATALOG_H
#define STM_CATALOG_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

#include "sql.h"

/* 1970-01-01 00:00 UTC: the first watermark, the default window origin */
#define STM_UNIX_EPOCH \
	((TimestampTz) -((int64) (POSTGRES_EPOCH_JDATE - UNIX_EPOCH_JDATE) * USECS_PER_DAY))

typedef enum StmTriggerKind
{
	STM_TRIGGER_INTERVAL,
	STM_TRIGGER_AVAILABLE_NOW,
	STM_TRIGGER_ONCE
} StmTriggerKind;

/* output_mode (SPEC 3.2) */
typedef enum StmOutputMode
{
	STM_OUTPUT_APPEND,
	STM_OUTPUT_UPDATE,
	STM_OUTPUT_COMPLETE,
	STM_OUTPUT_UPSERT			/* rows applied by key_columns (stateless) */
} StmOutputMode;

/* status, as streaming.streams shows it (SPEC 4) */
typedef enum StmStreamStatus
{
	STM_STATUS_RUNNING,
	STM_STATUS_WAITING,
	STM_STATUS_STOPPED,
	STM_STATUS_FAILED,
	STM_STATUS_FINISHED,
	STM_STATUS_MOVED			/* its share was exported to another server (SPEC 8) */
} StmStreamStatus;

typedef struct StmStreamDef
{
	int32		id;
	char	   *name;
	char	   *source;
	char	   *query;
	Oid			sink;
	Oid			sink_function;	/* foreachBatch, else InvalidOid */
	bool		has_dedup;		/* dedup_keys given */
	List	   *dedup_keys;		/* their names (source columns) */
	bool		dedup_within_watermark;
	StmOutputMode output_mode;
	bool		keep_late_rows; /* late_rows => 'keep' (else 'drop') */
	bool		has_watermark;
	Interval	watermark_delay;
	char	   *event_time;		/* NULL when none */
	char	   *trigger;
	StmTriggerKind trigger_kind;
	int64		trigger_interval_ms;
	bool		trigger_continuous; /* 'continuous' (SPEC 3.4): an interval of 0
									 * whose sources read for latency */
	char	   *search_path;
	Oid			owner;
	bool		enabled;
	StmStreamStatus status;
	int64		last_batch_id;	/* -1 before the first batch */
	bool		positions_initialized;	/* starting_offsets were applied */
	bool		no_data_batch_due;	/* the last batch moved the watermark */
	bool		has_watermark_value;
	TimestampTz watermark_value;
	int			failures;
	bool		has_idle_timeout;
	Interval	idle_timeout;
	int64		idle_timeout_us;	/* 0: none */
	TimestampTz idle_clock_at;	/* the last batch that read records, or the last idle advance */
	char	   *last_error;		/* NULL when none */
	char	   *sink_name;		/* a named sink (streaming.sinks), else NULL */
	char	   *sink_kind;		/* its kind */
	int			parallel_workers;	/* helpers that fetch and parse (parallel.c); 0: none;
								 * -1 (NULL): automatic (runtime.c) */
	/* a join of two sources (SPEC 3.6) */
	char	   *other_source;	/* the right side's source (NULL: none, or a self-join) */
	Jsonb	   *watermarks;		/* each side's event time and delay, as given */
	bool		max_watermark_policy;	/* multiple_watermark_policy 'max' (else 'min') */
	Jsonb	   *side_watermarks;	/* per side: what the batches learnt (NULL: nothing yet) */
	Jsonb	   *state_rows;		/* the state tables' rows the last batch left (NULL: unknown) */
	List	   *key_columns;	/* upsert mode: the sink's key (output column names) */
	bool		has_source_started_at;	/* the rate source's time origin is fixed */
	TimestampTz source_started_at;
} StmStreamDef;

typedef struct StmSourceDef
{
	char	   *name;
	char	   *kind;
	Oid			view;
	Oid			owner;
} StmSourceDef;

/* A named sink (streaming.sinks): a Kafka sink. */
typedef struct StmSinkDef
{
	char	   *name;
	char	   *kind;
	Jsonb	   *options;		/* the create function's arguments, as its kind's validate returned them */
	Oid			owner;
} StmSinkDef;

/* One committed batch, as streaming.batches (progress) keeps it. */
typedef struct StmBatchProgress
{
	int32		stream_id;
	int64		batch_id;
	TimestampTz started_at;
	int64		num_input_rows;
	int64		num_output_rows;
	int64		num_delivered_rows; /* reached the sink at commit (0: it delivers later) */
	int64		num_bad_rows;
	int64		num_late_rows;
	int64		num_dedup_rows;
	int64		num_state_rows;
	bool		has_max_event_time;
	TimestampTz max_event_time;
	bool		has_watermark;
	TimestampTz watermark;		/* the stream's new watermark */
	const char *start_positions;	/* jsonb text */
	const char *end_positions;
	const char *data_loss;		/* jsonb text, or NULL */
	/* the stream's row after the batch */
	bool		no_data_batch_due;
	TimestampTz idle_clock_at;	/* 0: unchanged */
	const char *source_error;	/* or NULL */
	const char *state_operators;	/* a join's state per side (jsonb text), or NULL */
	const char *side_watermarks;	/* a join's sides' watermarks (jsonb text), or NULL */
	const char *state_rows;		/* the aggregate's and dedup's state rows (jsonb text), or NULL */
} StmBatchProgress;

/* the catalog is at the library's version (else reported at elevel) */
extern bool stm_catalog_check_version(int elevel);

extern StmStreamDef *stm_catalog_get_stream(const char *name, bool missing_ok);
extern StmStreamDef *stm_catalog_get_stream_by_id(int32 id, bool lock);
extern bool stm_catalog_stream_exists(const char *name);
extern StmSourceDef *stm_catalog_get_source(const char *name, bool missing_ok);
extern bool stm_catalog_source_exists(const char *name);
extern StmSourceDef *stm_catalog_get_source_of_stream(StmStreamDef *def);
extern StmSourceDef *stm_catalog_get_source_by_view(Oid view);
extern StmSourceDef *stm_catalog_get_other_source_of_stream(StmStreamDef *def);
extern Jsonb *stm_catalog_source_options(const char *source);
extern StmSinkDef *stm_catalog_get_sink(const char *name, bool missing_ok);
extern bool stm_catalog_sink_exists(const char *name);
extern StmSinkDef *stm_catalog_get_sink_of_stream(StmStreamDef *def);
extern char *stm_catalog_source_option(const char *source, const char *path);
extern List *stm_catalog_source_option_list(const char *source, const char *sql_expr);
extern StmOutputMode stm_catalog_parse_output_mode(const char *name);
extern const char *stm_catalog_status_name(StmStreamStatus status);
extern const char *stm_catalog_output_mode_name(StmOutputMode mode);
extern void stm_catalog_set_status(int32 stream_id, StmStreamStatus status,
								   const char *last_error, bool clear_error,
								   int failures);
extern void stm_catalog_disable(int32 stream_id);
extern int32 stm_catalog_insert_stream(const StmStreamDef *def);
extern void stm_catalog_mark_positions_initialized(int32 stream_id);
extern void stm_catalog_set_source_error(int32 stream_id, const char *error);
extern void stm_catalog_record_batch(const StmBatchProgress *p, int history);
extern TimestampTz stm_catalog_last_trigger(int32 stream_id, TimestampTz since);
extern void stm_catalog_check_owner(const char *what, const char *name, Oid owner);
extern StmTriggerKind stm_catalog_parse_trigger(const char *trigger, int64 *interval_ms,
												 bool *continuous);

#endif
