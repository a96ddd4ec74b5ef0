/*
 * sink.c: what every sink kind shares (sink.h): finding a stream's kind and
 * routine, and the description of the rows it gets.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/memutils.h"

#include "sink.h"
#include "source.h"

/* the kinds, registered by _PG_init (streaming.c) */
#define MAX_SINK_KINDS 8
static const StmSinkRoutine *sink_kinds[MAX_SINK_KINDS];
static int	nsink_kinds = 0;

void
stm_sink_register(const StmSinkRoutine *routine)
{
	if (nsink_kinds >= MAX_SINK_KINDS)
		elog(ERROR, "too many sink kinds");
	sink_kinds[nsink_kinds++] = routine;
}

const StmSinkRoutine *
stm_sink_routine(const char *kind)
{
	for (int i = 0; i < nsink_kinds; i++)
		if (strcmp(sink_kinds[i]->kind, kind) == 0)
			return sink_kinds[i];
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized sink kind \"%s\"", kind)));
	return NULL;				/* keep compiler quiet */
}

/*
 * A stream writes to a named sink (streaming.sinks) of its kind, to a table,
 * or gives each batch's rows to its sink_function.
 */
const char *
stm_sink_kind(StmStreamDef *def)
{
	if (def->sink_kind)
		return def->sink_kind;
	return OidIsValid(def->sink_function) ? "function" : "table";
}

const StmSinkRoutine *
stm_sink_routine_of_stream(StmStreamDef *def)
{
	return stm_sink_routine(stm_sink_kind(def));
}

/* The kind create_stream's sink is of: as stm_sink_kind for the stream it makes. */
const StmSinkRoutine *
stm_sink_routine_of_target(const StmSinkTarget *target)
{
	if (target->named)
		return stm_sink_routine(target->named->kind);
	return stm_sink_routine(OidIsValid(target->function) ? "function" : "table");
}

/* The stream's sink, for a runtime: in the current memory context. */
StmSink *
stm_sink_open(StmStreamDef *def)
{
	return stm_sink_routine(stm_sink_kind(def))->open(def);
}

/*
 * The query's output columns, as the sink gets them; key_columns: upsert
 * mode's key (checked by create_stream).  Upsert mode over a change stream
 * adds a last column to the query's outputs (stm_query_add_output), the
 * source row's cdc_op, so that each row says whether it deletes its key,
 * whether or not the query selects cdc_op (SPEC 2.1.2).
 */
StmSinkOutput *
stm_sink_output(StmQueryInfo *qi, StmOutputMode mode, List *key_columns)
{
	StmSinkOutput *out = palloc0(sizeof(StmSinkOutput));
	AttrNumber	change = mode == STM_OUTPUT_UPSERT ?
		stm_source_change_column(qi->source_view) : InvalidAttrNumber;

	if (change != InvalidAttrNumber)
	{
		out->has_change = true;
		stm_query_add_output(qi, (Expr *) makeVar(qi->source_rtindex, change, TEXTOID, -1,
												  DEFAULT_COLLATION_OID, 0),
							 "streaming change");
	}
	out->desc = CreateTemplateTupleDesc(qi->noutputs);
	out->is_key = palloc0(sizeof(bool) * Max(qi->noutputs, 1));
	for (int i = 0; i < qi->noutputs; i++)
	{
		TupleDescInitEntry(out->desc, i + 1, qi->out_names[i], qi->out_types[i],
						   qi->out_typmods[i], 0);
		TupleDescInitEntryCollation(out->desc, i + 1, qi->out_collations[i]);
		out->is_key[i] = qi->agg != NULL && qi->agg->out_group_col[i] >= 0;
		if (mode == STM_OUTPUT_UPSERT && !(out->has_change && i == qi->noutputs - 1))
		{
			ListCell   *lc;

			foreach(lc, key_columns)
				out->is_key[i] |= strcmp(lfirst(lc), qi->out_names[i]) == 0;
		}
	}
	out->mode = mode;
	out->deletes = out->mode == STM_OUTPUT_UPDATE && qi->agg != NULL &&
		qi->agg->window.kind == STM_WINDOW_SESSION;
	return out;
}


/*
 * Upsert mode (SPEC 3.2): each row is applied by its key, in source order:
 * upserted, or, from a change stream, its key deleted when the row's
 * cdc_op is 'd'.  Counted as the batch's rows either way.
 */
void
stm_sink_apply_change(StmSinkBatch *batch, Datum *values, bool *nulls)
{
	batch->rows++;
	if (stm_sink_change_is_delete(batch->output, values, nulls))
		batch->sink->routine->delete_key(batch, values, nulls);
	else
		batch->sink->routine->upsert(batch, values, nulls);
}

/* Does an upsert mode row delete its key (its change column, cdc_op, is 'd')? */
bool
stm_sink_change_is_delete(const StmSinkOutput *output, const Datum *values, const bool *nulls)
{
	int			c = output->desc->natts - 1;

	return output->has_change && !nulls[c] && VARSIZE_ANY_EXHDR(DatumGetPointer(values[c])) == 1 &&
		*VARDATA_ANY(DatumGetPointer(values[c])) == 'd';
}
