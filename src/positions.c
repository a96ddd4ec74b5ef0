/*
 * positions.c: the one reader and writer of streaming.positions, for every
 * source kind (positions.h says what a part and a position are).
 *
 * A stream's positions belong to one of its sources (a join reads two):
 * every call names the source, and touches that source's parts only.  A
 * kind hands over its parts as a List of StmPosition; each call is one
 * statement over arrays of them (unnest), as the extension's owner with
 * search_path pinned (catalog.c), in the caller's transaction: a batch's
 * positions commit with its results.  Reads are not read-only SPI calls, so
 * under READ COMMITTED each sees the latest commits (process_available asks
 * again and again).  An upsert leaves a part whose row says the same alone,
 * so an idle part or an unchanged pending file costs no new row version.
 *
 * A stream's worker keeps its stream's positions in memory
 * (stm_positions_keep): it holds the stream's lock for its life, and every
 * other writer of a stream's positions (reset, export_share, import_share,
 * alter_kafka_source) must take that lock first, so what the table holds
 * is what the worker's own transactions read and committed.  Its batches
 * then plan without reading the table: a continuous stream plans hundreds
 * of times a second.  Within a transaction, what it reads and writes is
 * kept apart (txn_known) and becomes the process's (known) at its commit;
 * an abort forgets it, and a subtransaction's abort forgets everything
 * (what it wrote is gone, what the transaction wrote before it is not):
 * the next read asks the table again.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "catalog.h"
#include "sql.h"
#include "positions.h"

StmPosition *
stm_position_make(const char *part, int32 part_no, int64 position, int64 end_position)
{
	StmPosition *p = palloc0(sizeof(StmPosition));

	p->part = pstrdup(part);
	p->part_no = part_no;
	p->position = position;
	p->has_end = true;
	p->end_position = end_position;
	return p;
}

/*
 * The statement's parameters: the stream, the source, and one array per
 * column of the parts (part, part_no, position, end_position, detail).
 */
static void
bind_positions(StmSql *q, int32 stream_id, const char *source, List *positions)
{
	int			n = list_length(positions);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	Datum	   *parts = palloc0(sizeof(Datum) * Max(n, 1));
	Datum	   *part_nos = palloc0(sizeof(Datum) * Max(n, 1));
	Datum	   *pos = palloc0(sizeof(Datum) * Max(n, 1));
	Datum	   *ends = palloc0(sizeof(Datum) * Max(n, 1));
	bool	   *end_nulls = palloc0(sizeof(bool) * Max(n, 1));
	Datum	   *details = palloc0(sizeof(Datum) * Max(n, 1));
	bool	   *detail_nulls = palloc0(sizeof(bool) * Max(n, 1));
	ListCell   *lc;

	foreach(lc, positions)
	{
		StmPosition *p = lfirst(lc);
		int			i = foreach_current_index(lc);

		parts[i] = CStringGetTextDatum(p->part);
		part_nos[i] = Int32GetDatum(p->part_no);
		pos[i] = Int64GetDatum(p->position);
		ends[i] = Int64GetDatum(p->end_position);
		end_nulls[i] = !p->has_end;
		details[i] = p->detail ? CStringGetTextDatum(p->detail) : (Datum) 0;
		detail_nulls[i] = p->detail == NULL;
	}
	stm_sql_int4(q, "stream_id", stream_id);
	stm_sql_text(q, "source", source);
	stm_sql_param(q, "parts", TEXTARRAYOID,
				  PointerGetDatum(construct_md_array(parts, NULL, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT)), false);
	stm_sql_param(q, "part_nos", INT4ARRAYOID,
				  PointerGetDatum(construct_md_array(part_nos, NULL, 1, dims, lbs, INT4OID, 4, true, TYPALIGN_INT)), false);
	stm_sql_param(q, "positions", INT8ARRAYOID,
				  PointerGetDatum(construct_md_array(pos, NULL, 1, dims, lbs, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)), false);
	stm_sql_param(q, "ends", INT8ARRAYOID,
				  PointerGetDatum(construct_md_array(ends, end_nulls, 1, dims, lbs, INT8OID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE)), false);
	stm_sql_param(q, "details", TEXTARRAYOID,
				  PointerGetDatum(construct_md_array(details, detail_nulls, 1, dims, lbs, TEXTOID, -1, false, TYPALIGN_INT)), false);
}

/* ---- the worker's positions, kept ---------------------------------------- */

/* One source's positions, every part, as the table holds them. */
typedef struct KnownSource
{
	char	   *source;
	List	   *positions;		/* StmPosition */
} KnownSource;

static int32 kept_stream = -1;	/* the stream whose positions this process keeps */
static MemoryContext known_cxt = NULL;	/* known: committed */
static List *known = NIL;
static MemoryContext txn_cxt = NULL;	/* txn_known: this transaction's, reset at its end */
static List *txn_known = NIL;

static StmPosition *
copy_position(const StmPosition *p)
{
	StmPosition *c = palloc(sizeof(StmPosition));

	*c = *p;
	c->part = pstrdup(p->part);
	c->detail = p->detail ? pstrdup(p->detail) : NULL;
	return c;
}

static List *
copy_positions(List *positions)
{
	List	   *result = NIL;
	ListCell   *lc;

	foreach(lc, positions)
		result = lappend(result, copy_position(lfirst(lc)));
	return result;
}

static KnownSource *
find_known(List *list, const char *source)
{
	ListCell   *lc;

	foreach(lc, list)
	{
		KnownSource *k = lfirst(lc);

		if (strcmp(k->source, source) == 0)
			return k;
	}
	return NULL;
}

/* The source's positions this transaction knows of (its own, else the committed), or NULL. */
static KnownSource *
lookup_known(const char *source)
{
	KnownSource *k = find_known(txn_known, source);

	return k ? k : find_known(known, source);
}

/* This transaction now knows these to be all of the source's positions. */
static void
set_txn_known(const char *source, List *positions)
{
	MemoryContext old = MemoryContextSwitchTo(txn_cxt);
	KnownSource *k = find_known(txn_known, source);

	if (k == NULL)
	{
		k = palloc(sizeof(KnownSource));
		k->source = pstrdup(source);
		txn_known = lappend(txn_known, k);
	}
	k->positions = copy_positions(positions);
	MemoryContextSwitchTo(old);
}

static void
forget_known(void)
{
	MemoryContextReset(txn_cxt);
	txn_known = NIL;
	MemoryContextReset(known_cxt);
	known = NIL;
}

/* At the transaction's end: what it knew becomes the process's at a commit. */
static void
positions_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			foreach(lc, txn_known)
			{
				KnownSource *t = lfirst(lc);
				KnownSource *k = find_known(known, t->source);
				MemoryContext old = MemoryContextSwitchTo(known_cxt);

				if (k == NULL)
				{
					k = palloc(sizeof(KnownSource));
					k->source = pstrdup(t->source);
					known = lappend(known, k);
				}
				/* the old copy stays in known_cxt until the next forget: a few parts */
				k->positions = copy_positions(t->positions);
				MemoryContextSwitchTo(old);
			}
			break;
		case XACT_EVENT_PREPARE:
			forget_known();
			return;
		default:
			break;
	}
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		MemoryContextReset(txn_cxt);
		txn_known = NIL;
	}
}

/* A subtransaction rolled back: what it wrote is gone, and nothing says which. */
static void
positions_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						   SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		forget_known();
}

/*
 * This process is the worker of the stream, holding its lock for its life:
 * it keeps the stream's positions from now on (see the file's header).
 */
void
stm_positions_keep(int32 stream_id)
{
	if (known_cxt == NULL)
	{
		known_cxt = AllocSetContextCreate(TopMemoryContext, "streaming positions",
										  ALLOCSET_SMALL_SIZES);
		txn_cxt = AllocSetContextCreate(TopMemoryContext, "streaming positions of a transaction",
										ALLOCSET_SMALL_SIZES);
		RegisterXactCallback(positions_xact_callback, NULL);
		RegisterSubXactCallback(positions_subxact_callback, NULL);
	}
	forget_known();
	kept_stream = stream_id;
}

/* A part's detail as the table gives it back: jsonb's text of it. */
static char *
normal_detail(const char *detail)
{
	if (detail == NULL)
		return NULL;
	return TextDatumGetCString(DirectFunctionCall1(jsonb_out,
												   DirectFunctionCall1(jsonb_in, CStringGetDatum(detail))));
}

/* After an upsert of these parts: the source's positions, if they were known. */
static void
note_written(const char *source, List *written, bool replace)
{
	KnownSource *k = replace ? NULL : lookup_known(source);
	List	   *result;
	ListCell   *lc;
	ListCell   *lr;

	if (!replace && k == NULL)
		return;					/* not known: the next read asks the table */
	result = replace ? NIL : copy_positions(k->positions);
	foreach(lc, written)
	{
		StmPosition *w = copy_position(lfirst(lc));
		bool		found = false;

		w->detail = normal_detail(w->detail);
		foreach(lr, result)
		{
			StmPosition *r = lfirst(lr);

			if (r->part_no == w->part_no && strcmp(r->part, w->part) == 0)
			{
				lfirst(lr) = w;
				found = true;
				break;
			}
		}
		if (!found)
			result = lappend(result, w);
	}
	set_txn_known(source, result);
}

/* Does the part's row say this already (its detail as the table gives it back)? */
static bool
known_same(KnownSource *k, const StmPosition *w)
{
	ListCell   *lc;

	foreach(lc, k->positions)
	{
		StmPosition *r = lfirst(lc);

		if (r->part_no == w->part_no && strcmp(r->part, w->part) == 0)
		{
			char	   *detail = normal_detail(w->detail);

			return r->position == w->position && r->has_end == w->has_end &&
				(!r->has_end || r->end_position == w->end_position) &&
				(r->detail == NULL ? detail == NULL :
				 detail != NULL && strcmp(r->detail, detail) == 0);
		}
	}
	return false;
}

static void
read_position(void *arg, HeapTuple tuple, TupleDesc desc)
{
	List	  **result = arg;
	StmPosition *p = palloc0(sizeof(StmPosition));
	bool		isnull;
	Datum		end;

	p->part = stm_sql_get_text(tuple, desc, "part");
	p->part_no = DatumGetInt32(stm_sql_get_datum(tuple, desc, "part_no", &isnull));
	p->position = DatumGetInt64(stm_sql_get_datum(tuple, desc, "position", &isnull));
	end = stm_sql_get_datum(tuple, desc, "end_position", &isnull);
	p->has_end = !isnull;
	p->end_position = isnull ? 0 : DatumGetInt64(end);
	p->detail = stm_sql_get_text(tuple, desc, "detail");
	*result = lappend(*result, p);
}

/*
 * The positions of the stream's source, every part (StmPosition, in the
 * caller's memory context), in a fresh snapshot.
 */
List *
stm_positions_read(int32 stream_id, const char *source)
{
	List	   *result = NIL;
	StmSql		q;

	if (stream_id == kept_stream)
	{
		KnownSource *k = lookup_known(source);

		if (k)
			return copy_positions(k->positions);
	}
	stm_sql_init(&q, "SELECT part, part_no, position, end_position, detail::text AS detail "
				 "FROM streaming.positions WHERE stream_id = :stream_id AND source = :source");
	stm_sql_int4(&q, "stream_id", stream_id);
	stm_sql_text(&q, "source", source);
	(void) stm_catalog_run(&q, SPI_OK_SELECT, read_position, &result);
	if (stream_id == kept_stream)
		set_txn_known(source, result);
	return result;
}

/*
 * Store these parts' positions (insert, or update a part's row when it
 * says something else); the source's other parts keep theirs.
 */
void
stm_positions_write(int32 stream_id, const char *source, List *positions)
{
	StmSql		q;
	KnownSource *k = stream_id == kept_stream ? lookup_known(source) : NULL;

	/*
	 * the parts whose rows say the same are left alone anyway, but the
	 * upsert locks each of them (a WAL record a part): a worker that knows
	 * them writes the others only (a Kafka batch touches a few of many)
	 */
	if (k)
	{
		List	   *changed = NIL;
		ListCell   *lc;

		foreach(lc, positions)
			if (!known_same(k, lfirst(lc)))
				changed = lappend(changed, lfirst(lc));
		positions = changed;
	}
	if (positions == NIL)
		return;
	stm_sql_init(&q, "INSERT INTO streaming.positions AS p (stream_id, source, part, part_no, position, end_position, detail) "
				 "SELECT :stream_id, :source, u.part, u.part_no, u.position, u.end_position, u.detail::jsonb "
				 "FROM unnest(:parts, :part_nos, :positions, :ends, :details) "
				 "AS u(part, part_no, position, end_position, detail) "
				 "ON CONFLICT (stream_id, source, part, part_no) DO UPDATE "
				 "SET position = EXCLUDED.position, end_position = EXCLUDED.end_position, detail = EXCLUDED.detail "
				 "WHERE (p.position, p.end_position, p.detail) IS DISTINCT FROM "
				 "(EXCLUDED.position, EXCLUDED.end_position, EXCLUDED.detail)");
	bind_positions(&q, stream_id, source, positions);
	(void) stm_catalog_run(&q, SPI_OK_INSERT, NULL, NULL);
	if (stream_id == kept_stream)
		note_written(source, positions, false);
}

/* These parts' positions, and no others: the source's other parts are forgotten. */
void
stm_positions_replace(int32 stream_id, const char *source, List *positions)
{
	StmSql		q;

	stm_sql_init(&q, "DELETE FROM streaming.positions p WHERE p.stream_id = :stream_id AND p.source = :source "
				 "AND NOT EXISTS (SELECT FROM unnest(:parts, :part_nos) AS k(part, part_no) "
				 "WHERE k.part = p.part AND k.part_no = p.part_no)");
	bind_positions(&q, stream_id, source, positions);
	q.nparams = 4;				/* positions, ends and details are not used */
	(void) stm_catalog_run(&q, SPI_OK_DELETE, NULL, NULL);
	stm_positions_write(stream_id, source, positions);
	if (stream_id == kept_stream)
		note_written(source, positions, true);
}

static void
read_bool(void *arg, HeapTuple tuple, TupleDesc desc)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tuple, desc, 1, &isnull);

	*(bool *) arg = !isnull && DatumGetBool(d);
}

/*
 * Has the stream's committed position reached the target's in every target
 * part of the source (a part it has no position in has not)?  In a fresh
 * snapshot.
 */
bool
stm_positions_reached(int32 stream_id, const char *source, List *targets)
{
	StmSql		q;
	bool		reached = false;

	stm_sql_init(&q, "SELECT NOT EXISTS (SELECT FROM unnest(:parts, :part_nos, :positions) AS t(part, part_no, position) "
				 "LEFT JOIN streaming.positions p ON p.stream_id = :stream_id AND p.source = :source "
				 "AND p.part = t.part AND p.part_no = t.part_no WHERE coalesce(p.position, -1) < t.position)");
	bind_positions(&q, stream_id, source, targets);
	q.nparams = 5;				/* ends and details are not used */
	(void) stm_catalog_run(&q, SPI_OK_SELECT, read_bool, &reached);
	return reached;
}

/* streaming.reset(): the stream forgets every position, of every source. */
void
stm_positions_forget(int32 stream_id)
{
	StmSql		q;

	stm_sql_init(&q, "DELETE FROM streaming.positions WHERE stream_id = :stream_id");
	stm_sql_int4(&q, "stream_id", stream_id);
	(void) stm_catalog_run(&q, SPI_OK_DELETE, NULL, NULL);
	if (stream_id == kept_stream)
		forget_known();
}
