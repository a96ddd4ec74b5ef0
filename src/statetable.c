/*
 * statetable.c: tables and keys of the stateful operators.
 *
 * State tables (streaming.state_<id>, streaming.dedup_<id>) live in schema
 * streaming and belong to the extension's owner, as the catalog does: the
 * stream's owner may read them but not change them (SPEC 7), since states
 * of type internal are stored as bytes that only the aggregates' own
 * serialize functions may make (their deserialize functions trust them).
 * Batches reach them as the extension's owner (stm_statetable_begin), with
 * statements that hold only built-in operators on built-in types: group
 * values are compared in C, as the stream's owner (aggstate.c).  The
 * tables depend on the extension (schema streaming outlives DROP
 * EXTENSION, so DROP EXTENSION ... CASCADE must take them along).
 *
 * Keys are the key values in their types' binary send format, each with
 * its length (-1 for NULL), so that NULLs are keys like any other and a key
 * is one bytea: a primary key in the tables, a hash key in memory.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "common/hashfn.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/numeric.h"
#include "utils/regproc.h"

#include "catalog.h"
#include "source.h"
#include "statetable.h"

void
stm_statetable_create(const char *relname, const char *columns,
					  const char *index_column, const char *index2_columns, Oid owner)
{
	char	   *table = psprintf("streaming.%s", quote_identifier(relname));
	StmCatalogScope scope;
	ObjectAddress table_addr;
	ObjectAddress ext_addr;

	scope = stm_catalog_begin();
	stm_spi_exec(psprintf("CREATE TABLE %s (%s)", table, columns), 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	stm_spi_exec(psprintf("CREATE INDEX ON %s (%s)", table, index_column), 0, NULL, NULL, NULL,
				 SPI_OK_UTILITY);
	if (index2_columns)
		stm_spi_exec(psprintf("CREATE INDEX ON %s (%s)", table, index2_columns), 0, NULL, NULL, NULL,
					 SPI_OK_UTILITY);
	stm_spi_exec(psprintf("GRANT SELECT ON %s TO %s", table,
						  quote_identifier(GetUserNameFromId(owner, false))),
				 0, NULL, NULL, NULL, SPI_OK_UTILITY);
	stm_catalog_end(scope);

	CommandCounterIncrement();
	ObjectAddressSet(table_addr, RelationRelationId,
					 get_relname_relid(relname, get_namespace_oid("streaming", false)));
	ObjectAddressSet(ext_addr, ExtensionRelationId, get_extension_oid("streaming", false));
	recordDependencyOn(&table_addr, &ext_addr, DEPENDENCY_NORMAL);
}

/*
 * Around a statement on a state table: the extension's owner's identity
 * (only; search_path is the caller's to pin).  An error restores it with
 * the (sub)transaction's abort.
 */
StmStateAccess
stm_statetable_begin(void)
{
	StmStateAccess access;

	GetUserIdAndSecContext(&access.save_userid, &access.save_sec_context);
	SetUserIdAndSecContext(stm_catalog_extension_owner(),
						   access.save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	return access;
}

void
stm_statetable_end(StmStateAccess access)
{
	SetUserIdAndSecContext(access.save_userid, access.save_sec_context);
}

/*
 * The rows of a state table (progress.num_state_rows), counted, seeing this
 * batch's writes; without parallel workers: starting them cost a batch more
 * than the scan (several hundred ms per count).
 */
int64
stm_statetable_rows(const char *table)
{
	StmStateAccess access;
	int			nest;
	bool		isnull;
	int64		rows;

	SPI_connect();
	nest = NewGUCNestLevel();
	(void) set_config_option("max_parallel_workers_per_gather", "0", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	access = stm_statetable_begin();
	if (SPI_execute(psprintf("SELECT pg_catalog.count(*) FROM %s", table), false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not count the rows of %s", table);
	rows = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	stm_statetable_end(access);
	AtEOXact_GUC(true, nest);
	SPI_finish();
	return rows;
}

/*
 * A state table's rows after a batch: what the last committed batch left
 * (known when it was stored, in that batch's transaction, for this very
 * table) plus the batch's inserts less its deletes; counted when not known
 * (the first batch, after a reset or an import, a table made anew), so
 * that a batch does not scan the whole state to report its size.
 */
int64
stm_statetable_rows_after(const char *table, bool known, int64 prev, int64 delta)
{
	int64		rows;

	if (!known)
		return stm_statetable_rows(table);
	rows = prev + delta;
	Assert(rows == stm_statetable_rows(table));
	return rows;
}

/* The OID of a state table, by its qualified name (InvalidOid if none). */
static Oid
statetable_oid(const char *table)
{
	return RangeVarGetRelid(makeRangeVarFromNameList(stringToQualifiedNameList(table)),
							NoLock, true);
}

/*
 * The rows stored for a state table by the last committed batch
 * (stream_defs.state_rows: {"<table's OID>": rows, ...}); false when none
 * are, or they were of another table of the same name.
 */
bool
stm_statetable_stored_rows(Jsonb *stored, const char *table, int64 *rows)
{
	JsonbValue	key;
	JsonbValue *v;
	Oid			oid;

	if (stored == NULL || !JB_ROOT_IS_OBJECT(stored))
		return false;
	oid = statetable_oid(table);
	if (!OidIsValid(oid))
		return false;
	key.type = jbvString;
	key.val.string.val = psprintf("%u", oid);
	key.val.string.len = strlen(key.val.string.val);
	v = findJsonbValueFromContainer(&stored->root, JB_FOBJECT, &key);
	if (v == NULL || v->type != jbvNumeric)
		return false;
	*rows = DatumGetInt64(DirectFunctionCall1(numeric_int8, NumericGetDatum(v->val.numeric)));
	return true;
}

/* A state table's rows for stream_defs.state_rows: "<OID>": rows, after a ", " but for the first. */
void
stm_statetable_store_rows(StringInfo json, const char *table, int64 rows)
{
	Oid			oid = statetable_oid(table);

	if (!OidIsValid(oid))
		return;
	if (json->len > 0)
		appendStringInfoString(json, ", ");
	appendStringInfo(json, "\"%u\": " INT64_FORMAT, oid, rows);
}

static uint32
key_hash(const void *key, Size keysize)
{
	const bytea *k = *(bytea *const *) key;

	return DatumGetUInt32(hash_any((const unsigned char *) VARDATA_ANY(k), VARSIZE_ANY_EXHDR(k)));
}

static int
key_match(const void *key1, const void *key2, Size keysize)
{
	const bytea *a = *(bytea *const *) key1;
	const bytea *b = *(bytea *const *) key2;

	if (VARSIZE_ANY_EXHDR(a) != VARSIZE_ANY_EXHDR(b))
		return 1;
	return memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a));
}

/* A hash table whose entries start with a bytea * key. */
HTAB *
stm_keyhash_create(const char *name, Size entrysize, MemoryContext cxt)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(bytea *);
	ctl.entrysize = entrysize;
	ctl.hash = key_hash;
	ctl.match = key_match;
	ctl.hcxt = cxt;
	return hash_create(name, 256, &ctl, HASH_ELEM | HASH_FUNCTION | HASH_COMPARE | HASH_CONTEXT);
}

void
stm_key_init(StringInfo buf)
{
	initStringInfo(buf);
	appendStringInfoSpaces(buf, VARHDRSZ);
}

void
stm_key_append(StringInfo buf, FmgrInfo *send, Datum value, bool isnull)
{
	int32		len = -1;

	if (isnull)
		appendBinaryStringInfo(buf, (char *) &len, sizeof(len));
	else
	{
		bytea	   *b = SendFunctionCall(send, value);

		len = VARSIZE(b) - VARHDRSZ;
		appendBinaryStringInfo(buf, (char *) &len, sizeof(len));
		appendBinaryStringInfo(buf, VARDATA(b), len);
	}
}

bytea *
stm_key_finish(StringInfo buf)
{
	SET_VARSIZE(buf->data, buf->len);
	return (bytea *) buf->data;
}

/*
 * late_rows => 'keep' (SPEC 3.1): a row a stateful operator dropped as late
 * goes to streaming.late_rows with its position, as its source tells it from
 * the row's metadata columns.
 */
void
stm_late_row_keep(StmLateRows *late, Datum *values, bool *nulls, int event_time_att)
{
	char	   *position = stm_source_position(late->src, values + late->meta_att,
											   nulls + late->meta_att);

	if (late->forward)
		late->forward(late->forward_arg, position, values[event_time_att],
					  nulls[event_time_att]);
	else
		stm_late_row_store(late->stream_id, position, values[event_time_att],
						   nulls[event_time_att]);
}

/* A late row into streaming.late_rows, in the batch's transaction. */
void
stm_late_row_store(int32 stream_id, const char *position, Datum event_time, bool isnull)
{
	Oid			types[3] = {INT4OID, TEXTOID, TIMESTAMPTZOID};
	Datum		args[3];
	char		argnulls[3] = {' ', ' ', ' '};

	args[0] = Int32GetDatum(stream_id);
	args[1] = CStringGetTextDatum(position);
	args[2] = event_time;
	if (isnull)
		argnulls[2] = 'n';
	/* keyed by the stream's id: a later namesake sees none of them */
	stm_catalog_exec("INSERT INTO streaming.late_rows (stream, stream_id, position, event_time) "
					 "SELECT name, id, $2::jsonb, $3 FROM streaming.stream_defs WHERE id = $1",
					 3, types, args, argnulls, SPI_OK_INSERT);
}
