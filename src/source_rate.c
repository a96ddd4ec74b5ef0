/*
 * source_rate.c: the rate source (SPEC 2.3), for tests and benchmarks.
 *
 * A rate source makes the values 0, 1, 2, ... at rows_per_second; its
 * records have no payload, so its view's columns are all metadata:
 * "timestamp", value and partition.  Value v is in partition
 * v % num_partitions, and its timestamp is the stream's start time plus
 * ts(v), the first microsecond at which the count of values the schedule
 * has made reaches v (below).  A batch takes, in order, every value whose
 * timestamp is not after the batch's start (StmPlanContext.batch_start,
 * which progress shows as started_at), at most RATE_MAX_BATCH of them: a
 * stream never runs ahead of the clock, and one that fell behind catches
 * up over several batches.
 *
 * The schedule, in microseconds t after the start, with R = rows_per_second
 * and T = ramp_up_time: the rate grows linearly from 0 to R over [0, T],
 * then stays R, so the number of values made by t is its integral
 *     n(t) = R t^2 / (2 T 10^6)            for t <= T
 *     n(t) = R (2 t - T) / (2 10^6)        for t >= T
 * (without a ramp-up, n(t) = R t / 10^6).  Value v is due once n(t) >= v:
 * value 0 at the start, and the values due at t are 0 .. floor(n(t)).
 * Everything is computed exactly in integers (128-bit products during the
 * ramp-up, common/int128.h), so a replay gives bit-identical rows; the
 * create function refuses parameters for which that would overflow.
 *
 * Positions: streaming.positions holds, per partition p (positions.c: the
 * part is the source's name and p), the number of values of p the stream
 * has taken: value v is offset v / num_partitions of partition
 * v % num_partitions, as a Kafka record is an offset of its partition.  A
 * batch takes the values [from, to) in order, so the stored offsets always
 * sum to the next value, and the source_lag view counts rows: the end
 * position (high_watermark) is the number of the partition's values that
 * were due when the last batch was planned.  The start time is
 * streaming.stream_defs.source_started_at, written with the first batch's
 * positions in its transaction; it never moves afterwards, and reset
 * forgets it with the positions.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/int128.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "api.h"
#include "catalog.h"
#include "options.h"
#include "positions.h"
#include "source.h"
#include "source_rate.h"
#include "interrupts.h"
#include "parallel.h"

PG_FUNCTION_INFO_V1(streaming_create_rate_source);

#define RATE_MAX_BATCH 100000		/* values one batch takes at most */
#define RATE_MAX_ROWS_PER_SECOND INT64CONST(1000000000)
#define RATE_MAX_PARTITIONS 1000
#define TWO_MILLION INT64CONST(2000000)	/* 2 * 10^6, the denominator of n(t) */

/* An open rate source. */
typedef struct RateSource
{
	StmSource	base;			/* first: what the batch reads */
	int64		rows_per_second;	/* R */
	int32		num_partitions;
	int64		ramp_us;		/* T, in microseconds */
	int64		ramp_k;			/* 2 10^6 T */
	int64		ramp_last;		/* floor(n(T)): the last value due by the ramp-up's end */
	/* the batch being planned */
	TimestampTz start;			/* the stream's start time */
	bool		start_is_new;	/* this plan fixed it: saved with the positions */
	int64		from;			/* the batch takes the values [from, to) */
	int64		to;
	int64		due;			/* values due when the batch started */
	int64		limit;			/* available_now: never past this; -1: none */
	int			chunk_size;		/* the batch's (StmPlanContext.chunk_size) */
} RateSource;

/* ---- the schedule -------------------------------------------------------- */

/* The number of values of partition p among the values [0, n). */
static int64
partition_offset(RateSource *rs, int32 p, int64 n)
{
	return n > p ? (n - p - 1) / rs->num_partitions + 1 : 0;
}

/* K v <= R e^2, exactly (the ramp-up: R e fits, validate made sure) */
static bool
ramp_reached(RateSource *rs, int64 v, int64 e)
{
	INT128		kv = int64_to_int128(0);
	INT128		re2 = int64_to_int128(0);

	int128_add_int64_mul_int64(&kv, rs->ramp_k, v);
	int128_add_int64_mul_int64(&re2, rs->rows_per_second * e, e);
	return int128_compare(kv, re2) <= 0;
}

/*
 * The number of values due e microseconds after the start: floor(n(e)) + 1
 * (value 0 is due at the start), 0 before it.
 */
static int64
values_due(RateSource *rs, int64 e)
{
	int64		d;
	int64		n;

	if (e < 0)
		return 0;
	if (e < rs->ramp_us)
	{
		/* floor(R e^2 / K): an estimate, then made exact */
		n = (int64) ((double) rs->rows_per_second * (double) e / (double) rs->ramp_k * (double) e);
		n = Max(0, Min(n, rs->ramp_last));
		while (n < rs->ramp_last && ramp_reached(rs, n + 1, e))
			n++;
		while (n > 0 && !ramp_reached(rs, n, e))
			n--;
		return n + 1;
	}
	/* floor(R (2 e - T) / (2 10^6)) + 1, with d = 2 e - T split at 2 10^6 */
	if (pg_mul_s64_overflow(e, 2, &d) ||
		pg_sub_s64_overflow(d, rs->ramp_us, &d) ||
		pg_mul_s64_overflow(d / TWO_MILLION, rs->rows_per_second, &n) ||
		pg_add_s64_overflow(n, (d % TWO_MILLION) * rs->rows_per_second / TWO_MILLION + 1, &n))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("the values of rate source \"%s\" are out of range", rs->base.name),
				 errdetail("The stream started at %s.", timestamptz_to_str(rs->start))));
	return n;
}

/*
 * ts(v): the microseconds from the start to value v's timestamp, the
 * smallest t with n(t) >= v.
 */
static int64
value_offset(RateSource *rs, int64 v)
{
	int64		q;
	int64		r;
	int64		c;

	if (rs->ramp_us > 0 && v <= rs->ramp_last)
	{
		/* the smallest t <= T with R t^2 >= K v: an estimate, then made exact */
		int64		t = (int64) ceil(sqrt((double) rs->ramp_k / (double) rs->rows_per_second * (double) v));

		t = Max(0, Min(t, rs->ramp_us));
		while (t > 0 && ramp_reached(rs, v, t - 1))
			t--;
		while (t < rs->ramp_us && !ramp_reached(rs, v, t))
			t++;
		return t;
	}
	/* ceil((T + ceil(2 10^6 v / R)) / 2), with v = q R + r */
	q = v / rs->rows_per_second;
	r = v % rs->rows_per_second;
	c = TWO_MILLION * q + (TWO_MILLION * r + rs->rows_per_second - 1) / rs->rows_per_second;
	return (rs->ramp_us + c + 1) / 2;
}

/* ---- options ------------------------------------------------------------- */

/* ramp_up_time, stored as interval text */
static Interval *
ramp_up_interval(Jsonb *o)
{
	return DatumGetIntervalP(DirectFunctionCall3(interval_in,
												 CStringGetDatum(stm_option_text(o, "ramp_up_time")),
												 ObjectIdGetDatum(InvalidOid),
												 Int32GetDatum(-1)));
}

/* An interval in microseconds (a month is 30 days); false when it overflows. */
static bool
interval_us(Interval *iv, int64 *us)
{
	int64		days;

	return !(pg_mul_s64_overflow((int64) iv->month, DAYS_PER_MONTH, &days) ||
			 pg_add_s64_overflow(days, iv->day, &days) ||
			 pg_mul_s64_overflow(days, USECS_PER_DAY, us) ||
			 pg_add_s64_overflow(*us, iv->time, us));
}

/* A bigint option in [1, max]: "greater than zero" (SPEC 2.3), "at most max". */
static int64
check_count(Jsonb *o, const char *key, int64 max)
{
	char	   *text = stm_option_text(o, key);
	int64		v = pg_strtoint64(text);

	if (v <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be greater than zero", key),
				 errdetail("The value given was %s.", text)));
	if (v > max)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be at most " INT64_FORMAT, key, max),
				 errdetail("The value given was %s.", text)));
	return v;
}

/*
 * create_rate_source's arguments (SPEC 2.3).  ramp_up_time is stored as
 * hours:minutes:seconds, so that it reads the same under any IntervalStyle.
 */
static Jsonb *
rate_validate(Jsonb *o, Oid role)
{
	static const char *const required[] = {"rows_per_second", "num_partitions", "ramp_up_time", NULL};
	int64		rows_per_second;
	int64		ramp;
	int64		max_ramp;
	Interval   *iv;
	Interval	zero = {0};
	StringInfoData text;

	stm_source_require_options(o, required);
	rows_per_second = check_count(o, "rows_per_second", RATE_MAX_ROWS_PER_SECOND);
	(void) check_count(o, "num_partitions", RATE_MAX_PARTITIONS);
	iv = ramp_up_interval(o);
	if (DatumGetBool(DirectFunctionCall2(interval_lt, IntervalPGetDatum(iv),
										 IntervalPGetDatum(&zero))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ramp_up_time must not be negative"),
				 errdetail("The value given was \"%s\".", stm_option_text(o, "ramp_up_time"))));

	/* R T and 2 10^6 T must fit in 64 bits (value_offset, values_due) */
	max_ramp = PG_INT64_MAX / Max(rows_per_second, TWO_MILLION);
	if (!interval_us(iv, &ramp) || ramp > max_ramp)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ramp_up_time must be at most " INT64_FORMAT " seconds with rows_per_second " INT64_FORMAT,
						max_ramp / USECS_PER_SEC, rows_per_second),
				 errdetail("The value given was \"%s\".", stm_option_text(o, "ramp_up_time"))));

	initStringInfo(&text);
	appendStringInfo(&text, "%02" INT64_MODIFIER "d:%02d:%02d", ramp / USECS_PER_HOUR,
					 (int) (ramp / USECS_PER_MINUTE % 60), (int) (ramp / USECS_PER_SEC % 60));
	if (ramp % USECS_PER_SEC != 0)
		appendStringInfo(&text, ".%06d", (int) (ramp % USECS_PER_SEC));
	return stm_option_set_text(o, "ramp_up_time", text.data);
}

/* timestamp, value, partition (SPEC 2.3) */
static List *
rate_metadata_columns(Jsonb *options)
{
	static const StmMetaColumn columns[] = {
		{"timestamp", "pg_catalog.timestamptz"},
		{"value", "pg_catalog.int8"},
		{"partition", "pg_catalog.int4"}
	};
	List	   *result = NIL;

	for (int i = 0; i < lengthof(columns); i++)
		result = lappend(result, (void *) &columns[i]);
	return result;
}

/* ---- batches ------------------------------------------------------------- */

static StmSource *
rate_open(StmSource *base, bool for_batches)
{
	RateSource *rs = palloc0(sizeof(RateSource));
	Jsonb	   *o = base->options;

	rs->base = *base;
	rs->rows_per_second = stm_option_int64(o, "rows_per_second", 1);
	rs->num_partitions = (int32) stm_option_int64(o, "num_partitions", 1);
	/* validate made sure that T, R T and 2 10^6 T fit */
	(void) interval_us(ramp_up_interval(o), &rs->ramp_us);
	rs->ramp_k = TWO_MILLION * rs->ramp_us;
	rs->ramp_last = rs->rows_per_second * rs->ramp_us / TWO_MILLION;
	rs->limit = -1;
	return &rs->base;
}

/*
 * The stream's start time (false when it has none yet) and, through
 * offsets (num_partitions entries, zeroed), its stored positions; in a
 * fresh snapshot, as the extension's owner.  A plan passes its context:
 * the start time is then the one of the stream's row its batch locked
 * (no second read of that row).
 */
static bool
read_positions(RateSource *rs, int32 stream_id, TimestampTz *start, int64 *offsets, bool *any,
			   const StmPlanContext *ctx)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(stream_id);
	bool		isnull;
	Datum		started;
	List	   *stored;
	ListCell   *lc;

	*any = false;
	if (offsets)
		memset(offsets, 0, sizeof(int64) * rs->num_partitions);
	if (ctx)
	{
		isnull = !ctx->has_source_started_at;
		started = TimestampTzGetDatum(ctx->source_started_at);
	}
	else
		started = stm_catalog_value("SELECT source_started_at FROM streaming.stream_defs WHERE id = $1",
									1, &type, &value, &isnull);
	if (!isnull)
		*start = DatumGetTimestampTz(started);
	stored = stm_positions_read(stream_id, rs->base.name);
	foreach(lc, stored)
	{
		StmPosition *pos = lfirst(lc);
		int32		p = pos->part_no;

		if (strcmp(pos->part, rs->base.name) != 0)
			continue;
		if (p < 0 || p >= rs->num_partitions || pos->position < 0)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("stored position of rate source \"%s\" partition %d is invalid",
							rs->base.name, p),
					 errdetail("The source has %d partitions; the stored offset is " INT64_FORMAT ".",
							   rs->num_partitions, pos->position)));
		if (offsets)
			offsets[p] = pos->position;
		*any = true;
	}
	list_free_deep(stored);
	return !isnull;
}

/*
 * Fix the next batch's values [from, to) from the stored positions and the
 * batch's start: every value due then, at most RATE_MAX_BATCH of them (or
 * the sink's room, ctx->max_records), and under available_now, none past
 * what the runtime's first plan saw.
 */
static int64
rate_plan(StmSource *src, StmPlanContext *ctx)
{
	RateSource *rs = (RateSource *) src;
	int64	   *offsets = palloc(sizeof(int64) * rs->num_partitions);
	int64		next = 0;
	int64		end;
	bool		any;

	rs->start_is_new = !read_positions(rs, ctx->stream_id, &rs->start, offsets, &any, ctx);
	if (rs->start_is_new)
	{
		if (any)
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("rate source \"%s\" has stored positions but no start time", rs->base.name),
					 errhint("Reset the stream with streaming.reset().")));
		/* the stream's first batch: its start is the stream's */
		rs->start = ctx->batch_start;
	}

	/* the values taken so far are [0, next): every partition's share of them */
	for (int32 p = 0; p < rs->num_partitions; p++)
		next += offsets[p];
	for (int32 p = 0; p < rs->num_partitions; p++)
		if (offsets[p] != partition_offset(rs, p, next))
			ereport(ERROR,
					(errcode(ERRCODE_DATA_CORRUPTED),
					 errmsg("stored positions of rate source \"%s\" are inconsistent", rs->base.name),
					 errdetail("Partition %d is at offset " INT64_FORMAT ", but after " INT64_FORMAT
							   " values it should be at " INT64_FORMAT ".",
							   p, offsets[p], next, partition_offset(rs, p, next)),
					 errhint("Reset the stream with streaming.reset().")));
	pfree(offsets);

	rs->due = Max(next, values_due(rs, ctx->batch_start - rs->start));
	end = rs->due;
	/* available_now: what was due at the first plan, and no more */
	if (rs->base.bounded)
	{
		if (rs->limit < 0)
			rs->limit = rs->due;
		end = Min(end, rs->limit);
	}
	rs->from = next;
	rs->chunk_size = ctx->chunk_size;
	rs->to = Max(next, Min(end, next + RATE_MAX_BATCH));
	if (ctx->max_records >= 0)
		rs->to = Min(rs->to, next + ctx->max_records);
	return rs->to - rs->from;
}

/* {"<source>": {"0": offset, ...}} at the batch's start or end (Spark's shape) */
static char *
rate_positions_json(StmSource *src, bool end)
{
	RateSource *rs = (RateSource *) src;
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	escape_json(&buf, rs->base.name);
	appendStringInfoString(&buf, ": {");
	for (int32 p = 0; p < rs->num_partitions; p++)
		appendStringInfo(&buf, "%s\"%d\": " INT64_FORMAT, p > 0 ? ", " : "", p,
						 partition_offset(rs, p, end ? rs->to : rs->from));
	appendStringInfoString(&buf, "}}");
	return buf.data;
}

/*
 * The values [from, to), in chunks of the batch's size; a record's opaque
 * points at its value.
 */
static void
rate_fetch(StmSource *src, StmChunkFn fn, void *arg)
{
	RateSource *rs = (RateSource *) src;
	int64	   *values = palloc(sizeof(int64) * rs->chunk_size);
	StmRecord  *records = palloc0(sizeof(StmRecord) * rs->chunk_size);

	Assert(rs->chunk_size > 0);
	for (int64 v = rs->from; v < rs->to;)
	{
		int			n = (int) Min(rs->chunk_size, rs->to - v);

		stm_check_for_interrupts();
		for (int i = 0; i < n; i++)
		{
			values[i] = v + i;
			records[i].opaque = &values[i];
		}
		fn(arg, records, n);
		v += n;
	}
	pfree(values);
	pfree(records);
}

/* "timestamp", value, partition of the record's value */
static void
rate_fill_metadata(StmSource *src, StmRecord *rec, Datum *values, bool *nulls)
{
	RateSource *rs = (RateSource *) src;
	int64		v = *(int64 *) rec->opaque;

	values[0] = TimestampTzGetDatum(rs->start + value_offset(rs, v));
	values[1] = Int64GetDatum(v);
	values[2] = Int32GetDatum((int32) (v % rs->num_partitions));
	nulls[0] = nulls[1] = nulls[2] = false;
}

/* {"partition": p, "value": v}, from the partition and value columns */
static void
rate_position_json(StmSource *src, const Datum *meta, const bool *meta_nulls, StringInfo out)
{
	appendStringInfo(out, "{\"partition\": %d, \"value\": " INT64_FORMAT "}",
					 DatumGetInt32(meta[2]), DatumGetInt64(meta[1]));
}

/*
 * Every partition's offset at the batch's end and what was due, and the
 * start time when this batch fixed it: in the batch's transaction.
 */
static void
rate_save_positions(StmSource *src, int32 stream_id, int64 batch_id)
{
	RateSource *rs = (RateSource *) src;
	List	   *positions = NIL;

	if (rs->start_is_new)
	{
		StmSql		q;

		/* a join of two rate sources starts both with the stream's first batch */
		stm_sql_init(&q, "UPDATE streaming.stream_defs SET source_started_at = :start "
					 "WHERE id = :stream_id AND coalesce(source_started_at, :start) = :start");
		stm_sql_int4(&q, "stream_id", stream_id);
		stm_sql_timestamptz(&q, "start", rs->start, false);
		if (stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL) != 1)
			elog(ERROR, "could not write the start time of stream %d", stream_id);
	}
	for (int32 p = 0; p < rs->num_partitions; p++)
		positions = lappend(positions,
							stm_position_make(rs->base.name, p, partition_offset(rs, p, rs->to),
											  partition_offset(rs, p, rs->due)));
	stm_positions_write(stream_id, rs->base.name, positions);
	list_free_deep(positions);
	rs->start_is_new = false;
}

/*
 * Parallel helpers: the batch's values [from, to) split into nshares
 * contiguous runs, share s taking [from + s N / nshares, from + (s + 1) N
 * / nshares) with N = to - from.  A partition's values are the modulo of
 * one ordered sequence, so runs of it (not partitions) are the parts: each
 * share is in source order, the shares are consecutive (ordered_parts: a
 * dedup's first row of a key stays the first in value order, batch.c reads
 * them share after share), and any number of partitions, one too, splits
 * evenly.  The text after the chunk size: "start from to", the start time
 * in microseconds (fill_metadata's timestamps).  A helper's source never
 * plans and never saves positions; the leader's plan keeps them.
 */
static char *
rate_share_bounds(StmSource *src, int share, int nshares)
{
	RateSource *rs = (RateSource *) src;
	int64		n = rs->to - rs->from;	/* at most RATE_MAX_BATCH: no overflow below */
	StringInfoData buf;

	Assert(share >= 0 && share < nshares);
	initStringInfo(&buf);
	stm_source_share_begin(&buf, rs->chunk_size);
	appendStringInfo(&buf, INT64_FORMAT " " INT64_FORMAT " " INT64_FORMAT,
					 (int64) rs->start,
					 rs->from + n * share / nshares,
					 rs->from + n * (share + 1) / nshares);
	return buf.data;
}

/* A helper's share: exactly these values with the next fetch. */
static void
rate_set_share_bounds(StmSource *src, const char *bounds)
{
	RateSource *rs = (RateSource *) src;
	const char *rest = stm_source_share_chunk_size(bounds, &rs->chunk_size);
	int64		start;
	int64		from;
	int64		to;
	int			used = 0;

	if (sscanf(rest, INT64_FORMAT " " INT64_FORMAT " " INT64_FORMAT "%n",
			   &start, &from, &to, &used) != 3 || rest[used] != '\0' ||
		from < 0 || to < from)
		elog(ERROR, "malformed share bounds of rate source \"%s\": %s", rs->base.name, rest);
	rs->start = (TimestampTz) start;
	rs->from = from;
	rs->to = to;
	rs->due = to;
	rs->start_is_new = false;
}

/* process_available: the number of values due now */
static void *
rate_available(StmSource *src, int32 stream_id)
{
	RateSource *rs = (RateSource *) src;
	int64	   *target = palloc(sizeof(int64));
	TimestampTz now = GetCurrentTimestamp();
	bool		any;

	/* before its first batch, the stream starts now at the earliest */
	if (!read_positions(rs, stream_id, &rs->start, NULL, &any, NULL))
		rs->start = now;
	*target = values_due(rs, now - rs->start);
	return target;
}

/* Have the committed positions reached the values that were due? */
static bool
rate_reached(StmSource *src, int32 stream_id, void *available)
{
	RateSource *rs = (RateSource *) src;
	int64	   *offsets = palloc(sizeof(int64) * rs->num_partitions);
	int64		next = 0;
	TimestampTz start;
	bool		any;

	(void) read_positions(rs, stream_id, &start, offsets, &any, NULL);
	for (int32 p = 0; p < rs->num_partitions; p++)
		next += offsets[p];
	pfree(offsets);
	return next >= *(int64 *) available;
}

const StmSourceRoutine stm_rate_source = {
	.kind = "rate",
	.display_name = "rate source",
	.validate = rate_validate,
	.metadata_columns = rate_metadata_columns,
	.open = rate_open,
	.plan = rate_plan,
	.positions_json = rate_positions_json,
	.fetch = rate_fetch,
	.fill_metadata = rate_fill_metadata,
	.position_json = rate_position_json,
	.save_positions = rate_save_positions,
	.save_idle_positions = NULL,
	.data_loss_json = NULL,
	.available = rate_available,
	.reached = rate_reached,
	.after_commit = NULL,
	.share_bounds = rate_share_bounds,
	.set_share_bounds = rate_set_share_bounds,
	/*
	 * no share_parts: automatic streams take no helpers, rate values need no
	 * parsing and helpers only add their hand-over (two helpers measured at
	 * 0.91x of none stateless, 0.60x with dedup_keys); a number still works
	 */
	.ordered_parts = true,
	.close = NULL
};

/* streaming.create_rate_source(name, rows_per_second, num_partitions, ramp_up_time) */
Datum
streaming_create_rate_source(PG_FUNCTION_ARGS)
{
	return stm_api_create_source(fcinfo, &stm_rate_source);
}
