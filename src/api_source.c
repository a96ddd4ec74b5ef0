/*
 * api_source.c: the create functions of sources, and drop_source (SPEC 2).
 *
 * Every create function is this one generic function: it gathers its
 * arguments by name into a jsonb object (NULLs left out), lets the kind's
 * routine check and normalise them (source.h: validate), then creates the
 * source's view (its declared columns, then the kind's metadata columns)
 * and the catalog row.  A bad argument leaves nothing behind.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

#include "api.h"
#include "catalog.h"
#include "options.h"
#include "source.h"

PG_FUNCTION_INFO_V1(streaming_drop_source);

/* The view of a source: its declared and metadata columns, no rows. */
static Oid
create_view(const char *name, Jsonb *options, const StmSourceRoutine *routine)
{
	RangeVar   *rv = makeRangeVar(NULL, (char *) name, -1);
	Oid			nspid = RangeVarGetCreationNamespace(rv);
	char	   *qualified = quote_qualified_identifier(get_namespace_name(nspid), name);
	List	   *columns = list_concat(stm_source_declared_columns(options, routine),
									  routine->metadata_columns(options));
	StringInfoData sql;
	ListCell   *lc;
	Oid			view;
	ObjectAddress view_addr;
	ObjectAddress ext_addr;

	initStringInfo(&sql);
	appendStringInfo(&sql, "CREATE VIEW %s AS SELECT ", qualified);
	foreach(lc, columns)
	{
		StmMetaColumn *c = lfirst(lc);

		appendStringInfo(&sql, "%sCAST(NULL AS %s) AS %s", foreach_current_index(lc) > 0 ? ", " : "",
						 c->type, quote_identifier(c->name));
	}
	appendStringInfoString(&sql, " WHERE false");
	stm_api_exec(sql.data, 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	CommandCounterIncrement();
	view = get_relname_relid(name, nspid);
	/* DROP EXTENSION ... CASCADE takes the source views with it */
	ObjectAddressSet(view_addr, RelationRelationId, view);
	ObjectAddressSet(ext_addr, ExtensionRelationId, get_extension_oid("streaming", false));
	recordDependencyOn(&view_addr, &ext_addr, DEPENDENCY_NORMAL);
	stm_api_exec(psprintf("COMMENT ON VIEW %s IS %s", qualified,
						  quote_literal_cstr(psprintf("Columns of streaming source \"%s\"; stream queries read it, selecting from it returns no rows.", name))),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	return view;
}

/*
 * create_<kind>_source(name, ...): every kind's create function, called by
 * the kind's SQL-callable entry point.
 */
Datum
stm_api_create_source(FunctionCallInfo fcinfo, const StmSourceRoutine *routine)
{
	char	   *name;
	Jsonb	   *options;
	Oid			view;
	Oid			types[5] = {TEXTOID, TEXTOID, OIDOID, JSONBOID, OIDOID};
	Datum		values[5];

	(void) stm_catalog_check_version(ERROR);
	stm_arg_require(fcinfo, 0, "name");
	name = stm_arg_text(fcinfo, 0);
	options = routine->validate(stm_api_arguments_as_options(fcinfo), GetUserId());
	stm_arg_check_name("source", name);
	if (stm_catalog_source_exists(name))
		ereport(ERROR,
				(errcode(ERRCODE_DUPLICATE_OBJECT),
				 errmsg("source \"%s\" already exists", name)));

	view = create_view(name, options, routine);
	values[0] = CStringGetTextDatum(name);
	values[1] = CStringGetTextDatum(routine->kind);
	values[2] = ObjectIdGetDatum(view);
	values[3] = JsonbPGetDatum(options);
	values[4] = ObjectIdGetDatum(GetUserId());
	stm_catalog_exec("INSERT INTO streaming.sources (name, kind, view, options, owner) "
					 "VALUES ($1, $2, $3::oid::regclass, $4, $5::oid::regrole)",
					 5, types, values, NULL, SPI_OK_INSERT);
	if (routine->probe)
		routine->probe(name, options);
	PG_RETURN_VOID();
}

/* Drop a source the caller was checked for: refused while streams read it. */
void
stm_api_drop_source(StmSourceDef *src)
{
	Oid			type = TEXTOID;
	Datum		arg = CStringGetTextDatum(src->name);
	List	   *users;

	users = stm_catalog_source_option_list(src->name,
										   "SELECT string_agg(quote_ident(d.name), ', ' ORDER BY d.name) "
										   "FROM streaming.stream_defs d WHERE s.name IN (d.source, d.other_source) HAVING count(*) > 0");
	if (users != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
				 errmsg("source \"%s\" is used by streams", src->name),
				 errdetail("Streams reading it: %s.", ((char **) linitial(users))[0]),
				 errhint("Drop those streams first with streaming.drop_stream().")));
	stm_catalog_exec("DELETE FROM streaming.sources WHERE name = $1", 1, &type, &arg, NULL, SPI_OK_DELETE);
	if (get_rel_name(src->view) != NULL)
		stm_api_exec(psprintf("DROP VIEW %s",
							  quote_qualified_identifier(get_namespace_name(get_rel_namespace(src->view)),
														 get_rel_name(src->view))),
					 0, NULL, NULL, NULL, SPI_OK_UTILITY);
}

Datum
streaming_drop_source(PG_FUNCTION_ARGS)
{
	char	   *name = stm_arg_name(fcinfo);
	StmSourceDef *src = stm_catalog_get_source(name, false);

	stm_catalog_check_owner("source", name, src->owner);
	stm_api_drop_source(src);
	PG_RETURN_VOID();
}
