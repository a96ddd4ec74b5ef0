/*
 * api_sink.c: the create and drop functions of named sinks (SPEC 6.1), the
 * sinks a stream writes to that are not tables: rows of streaming.sinks,
 * each of a kind (sink.h).
 *
 * As for sources (api_source.c), every create function is this one generic
 * function: it gathers its arguments by name into a jsonb object (NULLs
 * left out), lets the kind's routine check and normalise them (sink.h:
 * validate), then inserts the catalog row.  A bad argument leaves nothing
 * behind.  A sink is dropped only while no stream writes to it.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"

#include "api.h"
#include "catalog.h"
#include "sink.h"

/*
 * create_<kind>_sink(name, ...): every kind's create function, called by
 * the kind's SQL-callable entry point.
 */
Datum
stm_api_create_sink(FunctionCallInfo fcinfo, const StmSinkRoutine *routine)
{
	char	   *name;
	Jsonb	   *options;
	Oid			types[4] = {TEXTOID, TEXTOID, JSONBOID, OIDOID};
	Datum		values[4];

	(void) stm_catalog_check_version(ERROR);
	stm_arg_require(fcinfo, 0, "name");
	name = stm_arg_text(fcinfo, 0);
	options = routine->validate(stm_api_arguments_as_options(fcinfo), GetUserId());
	stm_arg_check_name("sink", name);
	if (stm_catalog_sink_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("sink \"%s\" already exists", name)));

	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(routine->kind);
	values[2] = JsonbPGetDatum(options);
	values[3] = ObjectIdGetDatum(GetUserId());
	stm_catalog_exec("INSERT INTO streaming.sinks (name, kind, options, owner) "
					 "VALUES ($1, $2, $3, $4::oid::regrole)",
					 4, types, values, NULL, SPI_OK_INSERT);
	if (routine->probe)
		routine->probe(name, options);
	PG_RETURN_VOID();
}

/* The streams that write to a sink, as a list of quoted names, or NULL. */
static char *
sink_users(const char *sink)
{
	return stm_catalog_text("SELECT string_agg(quote_ident(name), ', ' ORDER BY name) "
							"FROM streaming.stream_defs WHERE sink_name = $1",
							TEXTOID, CStringGetTextDatum(sink));
}

/* True when a stream writes to the named sink. */
bool
stm_api_sink_in_use(const char *sink)
{
	return sink_users(sink) != NULL;
}

/* Drop a sink the caller was checked for: refused while streams write to it. */
void
stm_api_drop_sink(StmSinkDef *sink)
{
	Oid			type = TEXTOID;
	Datum		arg = CStringGetTextDatum(sink->name);
	char	   *users = sink_users(sink->name);

	if (users)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("sink \"%s\" is used by streams", sink->name),
				 errdetail("Streams writing to it: %s.", users),
				 errhint("Drop those streams first with streaming.drop_stream().")));
	stm_catalog_exec("DELETE FROM streaming.sinks WHERE name = $1", 1, &type, &arg, NULL,
					 SPI_OK_DELETE);
}

/* drop_<kind>_sink(name): the owner's (or a superuser's) sink of that kind. */
Datum
stm_api_drop_sink_of_kind(FunctionCallInfo fcinfo, const StmSinkRoutine *routine)
{
	char	   *name = stm_arg_name(fcinfo);
	StmSinkDef *sink = stm_catalog_get_sink(name, false);

	if (strcmp(sink->kind, routine->kind) != 0)
		ereport(ERROR,
				(errcode(ERRCODE_WRONG_OBJECT_TYPE),
				 errmsg("sink \"%s\" is not a %s sink", name, routine->display_name)));
	stm_catalog_check_owner("sink", name, sink->owner);
	stm_api_drop_sink(sink);
	PG_RETURN_VOID();
}
