/*
 * statetable.c: tables and keys of the stateful operators.
 *
 * State tables (streaming.state_<id>, streaming.dedup_<id>) live in schema
 * streaming, where roles cannot create tables: they are created as the
 * bootstrap superuser, then given to the stream's owner, and made to depend
 * on the extension (schema streaming outlives DROP EXTENSION, so
 * DROP EXTENSION ... CASCADE must take them along).
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
#include "utils/lsyscache.h"

#include "catalog.h"
#include "statetable.h"

void
stm_statetable_create(const char *relname, const char *columns,
					  const char *index_column, const char *index2_columns, Oid owner)
{
	char	   *table = psprintf("streaming.%s", quote_identifier(relname));
	Oid			save_userid;
	int			save_sec;
	int			nest;
	ObjectAddress table_addr;
	ObjectAddress ext_addr;

	GetUserIdAndSecContext(&save_userid, &save_sec);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	nest = stm_catalog_pin_search_path();
	SPI_connect();
	if (SPI_execute(psprintf("CREATE TABLE %s (%s)", table, columns), false, 0) != SPI_OK_UTILITY ||
		SPI_execute(psprintf("CREATE INDEX ON %s (%s)", table, index_column), false, 0) != SPI_OK_UTILITY ||
		(index2_columns &&
		 SPI_execute(psprintf("CREATE INDEX ON %s (%s)", table, index2_columns), false, 0) != SPI_OK_UTILITY) ||
		SPI_execute(psprintf("ALTER TABLE %s OWNER TO %s", table,
							 quote_identifier(GetUserNameFromId(owner, false))),
					false, 0) != SPI_OK_UTILITY)
		elog(ERROR, "could not create %s", table);
	SPI_finish();
	stm_catalog_unpin_search_path(nest);
	SetUserIdAndSecContext(save_userid, save_sec);

	CommandCounterIncrement();
	ObjectAddressSet(table_addr, RelationRelationId,
					 get_relname_relid(relname, get_namespace_oid("streaming", false)));
	ObjectAddressSet(ext_addr, ExtensionRelationId, get_extension_oid("streaming", false));
	recordDependencyOn(&table_addr, &ext_addr, DEPENDENCY_NORMAL);
}

/* The rows of a state table (progress.num_state_rows); inside SPI, seeing this batch's writes. */
int64
stm_statetable_rows(const char *table)
{
	bool		isnull;

	if (SPI_execute(psprintf("SELECT count(*) FROM %s", table), false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not count the rows of %s", table);
	return DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
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
 * goes to streaming.late_rows with its position (the source row's metadata
 * columns kafka_topic, kafka_partition, kafka_offset start at meta_att).
 */
void
stm_late_row_keep(const char *stream, Datum *values, bool *nulls, int meta_att,
				  int event_time_att)
{
	Oid			types[5] = {TEXTOID, TEXTOID, INT4OID, INT8OID, TIMESTAMPTZOID};
	Datum		args[5];
	char		argnulls[5] = {' ', ' ', ' ', ' ', ' '};
	StmCatalogScope scope = stm_catalog_begin();

	args[0] = CStringGetTextDatum(stream);
	args[1] = values[meta_att];
	args[2] = values[meta_att + 1];
	args[3] = values[meta_att + 2];
	args[4] = values[event_time_att];
	if (nulls[event_time_att])
		argnulls[4] = 'n';
	SPI_connect();
	/* keyed by the stream's id (the batch holds its row): a later namesake sees none */
	if (SPI_execute_with_args("INSERT INTO streaming.late_rows (stream, stream_id, position, event_time) "
							  "VALUES ($1, (SELECT id FROM streaming.stream_defs WHERE name = $1), "
							  "jsonb_build_object('topic', $2, 'partition', $3, 'offset', $4), $5)",
							  5, types, args, argnulls, false, 0) != SPI_OK_INSERT)
		elog(ERROR, "could not write streaming.late_rows");
	SPI_finish();
	stm_catalog_end(scope);
}
