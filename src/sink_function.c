/*
 * sink_function.c: foreachBatch (SPEC 3.2).  The batch's output rows go to
 * a temporary table, written as the table sink writes, which the stream's
 * sink_function gets with the batch id, in the batch's transaction; the
 * table is dropped after the call.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/acl.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/syscache.h"

#include "catalog.h"
#include "sink_table.h"

typedef struct FunctionSink
{
	StmSink		base;
	Oid			function;
} FunctionSink;

static char *
batch_table_name(int64 batch_id)
{
	return psprintf("streaming_batch_" INT64_FORMAT, batch_id);
}

/*
 * The batch's table.  In update mode it has the output's key, since a group
 * merged in two parts of the batch (aggstate.c) is upserted twice.
 */
static Oid
create_batch_table(const StmSinkOutput *output, int64 batch_id)
{
	char	   *name = batch_table_name(batch_id);
	Oid			userid;
	int			sec_context;
	int			nest;

	/*
	 * A security-restricted operation may not create temporary tables (user
	 * code could put objects in front of the search path); this one is ours,
	 * made before any user code runs, so the restriction is lifted for it.
	 */
	GetUserIdAndSecContext(&userid, &sec_context);
	SetUserIdAndSecContext(userid, sec_context & ~SECURITY_RESTRICTED_OPERATION);
	nest = stm_catalog_pin_search_path();
	stm_spi_exec(stm_sink_table_ddl(output, psprintf("pg_temp.%s", quote_identifier(name)),
									output->mode == STM_OUTPUT_UPDATE),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	stm_catalog_unpin_search_path(nest);
	SetUserIdAndSecContext(userid, sec_context);
	CommandCounterIncrement();
	return get_relname_relid(name, LookupExplicitNamespace("pg_temp", false));
}

static StmSinkBatch *
function_begin_batch(StmSink *sink, const StmSinkOutput *output, int64 batch_id, EState *estate)
{
	return stm_table_sink_begin(sink, create_batch_table(output, batch_id), output, batch_id,
								estate);
}

/* The rows are in the table: call the function, then drop the table. */
static void
function_end_batch(StmSinkBatch *batch)
{
	FunctionSink *fs = (FunctionSink *) batch->sink;
	char	   *table = batch_table_name(batch->batch_id);
	Oid			types[2] = {INT8OID, REGCLASSOID};
	Datum		values[2];

	stm_table_sink_end(batch);
	values[0] = Int64GetDatum(batch->batch_id);
	values[1] = ObjectIdGetDatum(get_relname_relid(table, LookupExplicitNamespace("pg_temp", false)));
	/* the user's function, under the stream's search_path (the batch's) */
	stm_spi_exec(psprintf("SELECT %s($1, $2)",
						  quote_qualified_identifier(get_namespace_name(get_func_namespace(fs->function)),
													 get_func_name(fs->function))),
				 2, types, values, NULL, SPI_OK_SELECT);
	stm_spi_exec(psprintf("DROP TABLE pg_temp.%s", quote_identifier(table)), 0, NULL, NULL, NULL,
				 SPI_OK_UTILITY);
}

/*
 * create_stream: the sink function must be a function of (batch_id bigint,
 * batch regclass) that the caller may execute (create_stream refused a
 * sink table besides it).
 */
static void
function_check_output(StmSinkTarget *target, const StmSinkOutput *output)
{
	HeapTuple	tup;
	Form_pg_proc proc;

	if (output->mode == STM_OUTPUT_UPSERT)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("output_mode \"upsert\" needs a sink table, not a sink_function"),
				 errdetail("Upsert mode applies each row to the sink table by its key; a sink function gets each batch's rows as they are."),
				 errhint("Use output_mode \"append\" and apply the rows by key in the function.")));
	tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(target->function));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for function %u", target->function);
	proc = (Form_pg_proc) GETSTRUCT(tup);
	if (proc->pronargs != 2 || proc->proargtypes.values[0] != INT8OID ||
		proc->proargtypes.values[1] != REGCLASSOID || proc->prokind != PROKIND_FUNCTION)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("sink_function %s must be a function of (batch_id bigint, batch regclass)",
						format_procedure(target->function))));
	ReleaseSysCache(tup);
	if (pg_proc_aclcheck(target->function, GetUserId(), ACL_EXECUTE) != ACLCHECK_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for function %s", format_procedure(target->function))));
	target->relid = InvalidOid;
}

static StmSink *
open_function_sink(StmStreamDef *def)
{
	FunctionSink *fs = palloc0(sizeof(FunctionSink));

	fs->base.routine = &stm_function_sink_routine;
	fs->base.stream_id = def->id;
	fs->base.stream_name = pstrdup(def->name);
	fs->base.owner = def->owner;
	fs->function = def->sink_function;
	return &fs->base;
}

const StmSinkRoutine stm_function_sink_routine = {
	.kind = "function",
	.display_name = "sink function",
	.check_output = function_check_output,
	.open = open_function_sink,
	.begin_batch = function_begin_batch,
	.insert = stm_table_sink_insert,
	.upsert = stm_table_sink_upsert,
	.delete_key = stm_table_sink_delete_key,
	.truncate = stm_table_sink_truncate,
	.end_batch = function_end_batch,
};
