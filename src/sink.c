/*
 * sink.c: what every sink kind shares (sink.h): finding a stream's kind and
 * routine, and the description of the rows it gets.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/memutils.h"

#include "sink.h"

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

/* The query's output columns, as the sink gets them. */
StmSinkOutput *
stm_sink_output(StmQueryInfo *qi, StmOutputMode mode)
{
	StmSinkOutput *out = palloc0(sizeof(StmSinkOutput));

	out->desc = CreateTemplateTupleDesc(qi->noutputs);
	out->is_key = palloc0(sizeof(bool) * Max(qi->noutputs, 1));
	for (int i = 0; i < qi->noutputs; i++)
	{
		TupleDescInitEntry(out->desc, i + 1, qi->out_names[i], qi->out_types[i],
						   qi->out_typmods[i], 0);
		TupleDescInitEntryCollation(out->desc, i + 1, qi->out_collations[i]);
		out->is_key[i] = qi->agg != NULL && qi->agg->out_group_col[i] >= 0;
	}
	out->mode = mode;
	out->deletes = out->mode == STM_OUTPUT_UPDATE && qi->agg != NULL &&
		qi->agg->window.kind == STM_WINDOW_SESSION;
	return out;
}

