/*
 * positions.c: the one reader and writer of streaming.positions, for every
 * source kind (positions.h says what a part and a position are).
 *
 * A kind hands over its parts as a List of StmPosition; each call is one
 * statement over arrays of them (unnest), as the extension's owner with
 * search_path pinned (catalog.c), in the caller's transaction: a batch's
 * positions commit with its results.  Reads are not read-only SPI calls, so
 * under READ COMMITTED each sees the latest commits (process_available asks
 * again and again).  An upsert leaves a part whose row says the same alone,
 * so an idle part or an unchanged pending file costs no new row version.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"

#include "catalog.h"
#include "positions.h"

/* the arguments of every statement below: $1 the stream, then one array per column */
#define POSITION_ARGS 6

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

/* The columns the statements pass as arrays, in the order of $2 .. $6. */
typedef struct ArrayColumn
{
	Oid			elem_type;
	Oid			array_type;
	int16		typlen;
	bool		typbyval;
	char		typalign;
} ArrayColumn;

static const ArrayColumn array_columns[POSITION_ARGS - 1] = {
	{TEXTOID, TEXTARRAYOID, -1, false, TYPALIGN_INT},	/* part */
	{INT4OID, INT4ARRAYOID, 4, true, TYPALIGN_INT}, /* part_no */
	{INT8OID, INT8ARRAYOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE},	/* position */
	{INT8OID, INT8ARRAYOID, 8, FLOAT8PASSBYVAL, TYPALIGN_DOUBLE},	/* end_position */
	{TEXTOID, TEXTARRAYOID, -1, false, TYPALIGN_INT}	/* detail, as text */
};

/*
 * The statements' arguments: $1 the stream, then part, part_no, position,
 * end_position and detail of every position, each an array.
 */
static void
position_args(int32 stream_id, List *positions, Oid *types, Datum *values)
{
	int			n = list_length(positions);
	int			dims[1] = {n};
	int			lbs[1] = {1};
	Datum	   *elems[POSITION_ARGS - 1];
	bool	   *nulls[POSITION_ARGS - 1];
	ListCell   *lc;

	for (int c = 0; c < POSITION_ARGS - 1; c++)
	{
		elems[c] = palloc0(sizeof(Datum) * Max(n, 1));
		nulls[c] = palloc0(sizeof(bool) * Max(n, 1));
	}
	foreach(lc, positions)
	{
		StmPosition *p = lfirst(lc);
		int			i = foreach_current_index(lc);

		elems[0][i] = CStringGetTextDatum(p->part);
		elems[1][i] = Int32GetDatum(p->part_no);
		elems[2][i] = Int64GetDatum(p->position);
		elems[3][i] = Int64GetDatum(p->end_position);
		nulls[3][i] = !p->has_end;
		elems[4][i] = p->detail ? CStringGetTextDatum(p->detail) : (Datum) 0;
		nulls[4][i] = p->detail == NULL;
	}
	types[0] = INT4OID;
	values[0] = Int32GetDatum(stream_id);
	for (int c = 0; c < POSITION_ARGS - 1; c++)
	{
		const ArrayColumn *col = &array_columns[c];

		types[c + 1] = col->array_type;
		values[c + 1] = PointerGetDatum(construct_md_array(elems[c], nulls[c], 1, dims, lbs,
														   col->elem_type, col->typlen,
														   col->typbyval, col->typalign));
	}
}

/*
 * The stream's positions, every part (StmPosition, in the caller's memory
 * context), in a fresh snapshot.
 */
List *
stm_positions_read(int32 stream_id)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(stream_id);
	List	   *result = NIL;
	StmCatalogScope scope = stm_catalog_begin();

	SPI_connect();
	if (SPI_execute_with_args("SELECT part, part_no, position, end_position, detail::text "
							  "FROM streaming.positions WHERE stream_id = $1",
							  1, &type, &value, NULL, false, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read streaming.positions");
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		HeapTuple	tup = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		MemoryContext oldcxt = MemoryContextSwitchTo(cxt);
		StmPosition *p = palloc0(sizeof(StmPosition));
		bool		isnull;
		Datum		end;
		char	   *detail;

		p->part = pstrdup(SPI_getvalue(tup, desc, 1));
		p->part_no = DatumGetInt32(SPI_getbinval(tup, desc, 2, &isnull));
		p->position = DatumGetInt64(SPI_getbinval(tup, desc, 3, &isnull));
		end = SPI_getbinval(tup, desc, 4, &isnull);
		p->has_end = !isnull;
		p->end_position = isnull ? 0 : DatumGetInt64(end);
		detail = SPI_getvalue(tup, desc, 5);
		p->detail = detail ? pstrdup(detail) : NULL;
		result = lappend(result, p);
		MemoryContextSwitchTo(oldcxt);
	}
	SPI_finish();
	stm_catalog_end(scope);
	return result;
}

/*
 * Store these parts' positions (insert, or update a part's row when it
 * says something else); the stream's other parts keep theirs.
 */
void
stm_positions_write(int32 stream_id, List *positions)
{
	Oid			types[POSITION_ARGS];
	Datum		values[POSITION_ARGS];

	if (positions == NIL)
		return;
	position_args(stream_id, positions, types, values);
	stm_catalog_exec("INSERT INTO streaming.positions AS p (stream_id, part, part_no, position, end_position, detail) "
					 "SELECT $1, u.part, u.part_no, u.position, u.end_position, u.detail::jsonb "
					 "FROM unnest($2, $3, $4, $5, $6) AS u(part, part_no, position, end_position, detail) "
					 "ON CONFLICT (stream_id, part, part_no) DO UPDATE "
					 "SET position = EXCLUDED.position, end_position = EXCLUDED.end_position, detail = EXCLUDED.detail "
					 "WHERE (p.position, p.end_position, p.detail) IS DISTINCT FROM "
					 "(EXCLUDED.position, EXCLUDED.end_position, EXCLUDED.detail)",
					 POSITION_ARGS, types, values, NULL, SPI_OK_INSERT);
}

/* These parts' positions, and no others: the stream's other parts are forgotten. */
void
stm_positions_replace(int32 stream_id, List *positions)
{
	Oid			types[POSITION_ARGS];
	Datum		values[POSITION_ARGS];

	position_args(stream_id, positions, types, values);
	stm_catalog_exec("DELETE FROM streaming.positions p WHERE p.stream_id = $1 AND NOT EXISTS "
					 "(SELECT FROM unnest($2, $3) AS k(part, part_no) WHERE k.part = p.part AND k.part_no = p.part_no)",
					 3, types, values, NULL, SPI_OK_DELETE);
	stm_positions_write(stream_id, positions);
}

/*
 * Has the stream's committed position reached the target's in every target
 * part (a part it has no position in has not)?  In a fresh snapshot.
 */
bool
stm_positions_reached(int32 stream_id, List *targets)
{
	Oid			types[POSITION_ARGS];
	Datum		values[POSITION_ARGS];
	bool		isnull;
	Datum		reached;

	position_args(stream_id, targets, types, values);
	reached = stm_catalog_value("SELECT NOT EXISTS (SELECT FROM unnest($2, $3, $4) AS t(part, part_no, position) "
								"LEFT JOIN streaming.positions p ON p.stream_id = $1 AND p.part = t.part "
								"AND p.part_no = t.part_no WHERE coalesce(p.position, -1) < t.position)",
								4, types, values, &isnull);
	return !isnull && DatumGetBool(reached);
}

/* streaming.reset(): the stream forgets every position. */
void
stm_positions_forget(int32 stream_id)
{
	Oid			type = INT4OID;
	Datum		value = Int32GetDatum(stream_id);

	stm_catalog_exec("DELETE FROM streaming.positions WHERE stream_id = $1",
					 1, &type, &value, NULL, SPI_OK_DELETE);
}
