/*
 * utility.c: what the extension does around PostgreSQL's own DDL (SPEC 1, 7).
 *
 * A ProcessUtility hook that acts before standard processing, and only
 * after the same permission checks PostgreSQL is about to make, so that a
 * refused command changes nothing:
 *   DROP EXTENSION streaming   stops the database's workers first (they
 *                              would hold locks the drop needs);
 *   DROP ROLE                  is refused while the role owns streams,
 *                              sources or sinks in this database, or running
 *                              streams in another one (naming them);
 *   DROP OWNED BY              drops the role's streams, sinks and sources
 *                              first;
 *   REASSIGN OWNED BY          gives them to the new role;
 *   ALTER VIEW, ALTER TABLE, RENAME, SET SCHEMA, CREATE OR REPLACE VIEW
 *                              of a source's view are refused (its owner
 *                              gets the error; others get PostgreSQL's).
 * Streams keep their owner in the catalog (streaming.stream_defs.owner), so
 * without these a dropped role would leave streams with a dangling owner.
 * DROP ROLE, DROP OWNED and REASSIGN OWNED act on one database; a stream in
 * another database whose owner is gone fails with a clear error (batch.c).
 *
 * A source's view is dropped only by streaming.drop_source (which forgets
 * the source first) or with the extension: an object access hook refuses
 * its drop however it comes, DROP VIEW or a cascade (DROP SCHEMA ...
 * CASCADE, DROP TYPE ... CASCADE of a column's type), since its streams
 * would fail at their next batch.  It runs in the middle of a deletion, after
 * PostgreSQL's permission checks, so it reads the catalog table directly
 * (no SPI).
 */
#include "postgres.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "commands/user.h"
#include "nodes/parsenodes.h"
#include "pgstat.h"
#include "storage/latch.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "api.h"
#include "catalog.h"
#include "shmem.h"
#include "utility.h"

static ProcessUtility_hook_type prev_process_utility = NULL;
static object_access_hook_type prev_object_access = NULL;

/* true while the extension itself is being dropped: its sources' views go with it */
static bool dropping_extension = false;

/* True when the extension is installed in this database. */
static bool
extension_installed(void)
{
	return OidIsValid(get_extension_oid("streaming", true));
}

/*
 * DROP EXTENSION streaming: the workers of this database would hold locks
 * on the catalog the drop needs, so ask them to finish and wait first; if
 * the drop then fails, they are wanted again when its transaction aborts.
 * Only for a role that may drop the extension: a refused drop stops nothing.
 */
static void
stop_all_workers(void)
{
	List	   *ids = NIL;
	ListCell   *lc;

	if (!stm_shmem_available() ||
		!pg_extension_ownercheck(get_extension_oid("streaming", false), GetUserId()))
		return;
	LWLockAcquire(stm_shared->lock, LW_SHARED);
	for (int i = 0; i < stm_shared->nslots; i++)
		if (stm_shared->slots[i].in_use && stm_shared->slots[i].dboid == MyDatabaseId)
		{
			ids = lappend_int(ids, stm_shared->slots[i].stream_id);
			stm_api_want_again_on_abort(stm_shared->slots[i].stream_id,
										stm_shared->slots[i].owner);
		}
	LWLockRelease(stm_shared->lock);
	foreach(lc, ids)
	{
		TimestampTz deadline = TimestampTzPlusMilliseconds(GetCurrentTimestamp(), 60 * 1000);

		stm_shmem_unwant_stream(MyDatabaseId, lfirst_int(lc));
		while (stm_shmem_stream_pid(MyDatabaseId, lfirst_int(lc)) != 0 &&
			   GetCurrentTimestamp() < deadline)
		{
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 10, PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			CHECK_FOR_INTERRUPTS();
		}
	}
}

/*
 * The names of what role owns in this database, as "stream a, source b",
 * or NULL when it owns nothing.
 */
static char *
owned_objects(Oid role)
{
	return stm_catalog_text("SELECT string_agg(what, ', ' ORDER BY what) FROM ("
							"SELECT 'stream ' || quote_ident(name) AS what FROM streaming.stream_defs WHERE owner = $1 "
							"UNION ALL "
							"SELECT 'source ' || quote_ident(name) FROM streaming.sources WHERE owner = $1 "
							"UNION ALL "
							"SELECT 'sink ' || quote_ident(name) FROM streaming.sinks WHERE owner = $1) o",
							OIDOID, ObjectIdGetDatum(role));
}

/* DROP ROLE: refused while a role to drop owns streams, sources or sinks. */
static void
check_drop_role(DropRoleStmt *stmt)
{
	ListCell   *lc;

	/* those who may not drop roles get PostgreSQL's own error */
	if (!has_createrole_privilege(GetUserId()))
		return;
	foreach(lc, stmt->roles)
	{
		RoleSpec   *spec = lfirst(lc);
		Oid			role;
		char	   *owned;
		char		stream[NAMEDATALEN];
		char		dbname[NAMEDATALEN];

		if (spec->roletype != ROLESPEC_CSTRING)
			continue;			/* PostgreSQL refuses CURRENT_USER and the like */
		role = get_role_oid(spec->rolename, true);
		if (!OidIsValid(role))
			continue;
		owned = extension_installed() ? owned_objects(role) : NULL;
		if (owned)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("role \"%s\" cannot be dropped because it owns streaming objects",
							spec->rolename),
					 errdetail("It owns %s.", owned),
					 errhint("Drop them with streaming.drop_stream(), streaming.drop_source() and streaming.drop_kafka_sink(), "
							 "or use REASSIGN OWNED BY or DROP OWNED BY first.")));
		if (stm_shmem_stream_of_owner_elsewhere(MyDatabaseId, role, stream, dbname))
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("role \"%s\" cannot be dropped because it owns streams in another database",
							spec->rolename),
					 errdetail("Stream \"%s\" of database \"%s\" runs as this role.", stream, dbname),
					 errhint("Use REASSIGN OWNED BY or DROP OWNED BY in that database first.")));
	}
}

/*
 * The roles of DROP OWNED / REASSIGN OWNED, if the current user has the
 * privileges of each (PostgreSQL's own check, made again later); else NIL,
 * and PostgreSQL raises its own error.
 */
static List *
roles_of(List *specs)
{
	List	   *roles = NIL;
	ListCell   *lc;

	foreach(lc, specs)
	{
		Oid			role = get_rolespec_oid(lfirst(lc), true);

		if (!OidIsValid(role) || !has_privs_of_role(GetUserId(), role))
			return NIL;
		roles = lappend_oid(roles, role);
	}
	return roles;
}

/* The ids of the streams, or names of the sources, that role owns. */
static List *
owned_list(const char *sql, Oid role)
{
	Oid			type = OIDOID;
	Datum		value = ObjectIdGetDatum(role);

	return stm_catalog_strings(sql, 1, &type, &value);
}

/*
 * DROP OWNED BY: the roles' streams (with what their sinks have not
 * delivered), then their named sinks and sources, are dropped first.
 */
static void
drop_owned(DropOwnedStmt *stmt)
{
	List	   *roles = roles_of(stmt->roles);
	ListCell   *lc;

	foreach(lc, roles)
	{
		ListCell   *lc2;

		foreach(lc2, owned_list("SELECT id FROM streaming.stream_defs WHERE owner = $1 ORDER BY id",
								lfirst_oid(lc)))
		{
			StmStreamDef *def = stm_catalog_get_stream_by_id(pg_strtoint32(lfirst(lc2)), false);

			if (def)
				stm_api_drop_stream(def, false, true);
		}
		foreach(lc2, owned_list("SELECT name FROM streaming.sinks WHERE owner = $1 ORDER BY name",
								lfirst_oid(lc)))
		{
			StmSinkDef *sink = stm_catalog_get_sink(lfirst(lc2), true);

			if (sink)
				stm_api_drop_sink(sink);
		}
		foreach(lc2, owned_list("SELECT name FROM streaming.sources WHERE owner = $1 ORDER BY name",
								lfirst_oid(lc)))
		{
			StmSourceDef *src = stm_catalog_get_source(lfirst(lc2), true);

			if (src)
				stm_api_drop_source(src);
		}
	}
}

/* REASSIGN OWNED BY: the roles' streams, sources and sinks go to the new role. */
static void
reassign_owned(ReassignOwnedStmt *stmt)
{
	List	   *roles = roles_of(stmt->roles);
	Oid			newrole = get_rolespec_oid(stmt->newrole, true);
	ListCell   *lc;

	if (roles == NIL || !OidIsValid(newrole) || !has_privs_of_role(GetUserId(), newrole))
		return;
	foreach(lc, roles)
	{
		static const char *const tables[] = {"stream_defs", "sources", "sinks"};

		for (int t = 0; t < lengthof(tables); t++)
		{
			StmSql		q;

			stm_sql_init(&q, psprintf("UPDATE streaming.%s SET owner = :new_owner::oid::regrole "
									  "WHERE owner = :old_owner", tables[t]));
			stm_sql_oid(&q, "old_owner", lfirst_oid(lc));
			stm_sql_oid(&q, "new_owner", newrole);
			(void) stm_catalog_run(&q, SPI_OK_UPDATE, NULL, NULL);
		}
		stm_shmem_reassign_owner(MyDatabaseId, lfirst_oid(lc), newrole);
	}
}

/* ---- a source's view belongs to its source (SPEC 1) -------------------- */

/*
 * The name of the source whose view relid is, or NULL when it is none.
 * streaming.sources is scanned directly with the latest snapshot: this runs
 * inside deletions, where SPI must not, and must see drop_source's own
 * delete of the row before it drops the view.
 */
static char *
source_of_view(Oid relid)
{
	Oid			nsp;
	Oid			sources;
	Relation	rel;
	TableScanDesc scan;
	Snapshot	snapshot;
	HeapTuple	tup;
	AttrNumber	name_att = InvalidAttrNumber;
	AttrNumber	view_att = InvalidAttrNumber;
	char	   *result = NULL;

	if (get_rel_relkind(relid) != RELKIND_VIEW || !extension_installed())
		return NULL;
	nsp = get_namespace_oid("streaming", true);
	sources = OidIsValid(nsp) ? get_relname_relid("sources", nsp) : InvalidOid;
	if (!OidIsValid(sources))
		return NULL;
	rel = table_open(sources, AccessShareLock);
	for (int i = 0; i < RelationGetDescr(rel)->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(RelationGetDescr(rel), i);

		if (strcmp(NameStr(att->attname), "name") == 0)
			name_att = att->attnum;
		else if (strcmp(NameStr(att->attname), "view") == 0)
			view_att = att->attnum;
	}
	if (name_att == InvalidAttrNumber || view_att == InvalidAttrNumber)
		elog(ERROR, "streaming.sources has no columns name and view");
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	scan = table_beginscan(rel, snapshot, 0, NULL);
	while (result == NULL && (tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		Datum		view = heap_getattr(tup, view_att, RelationGetDescr(rel), &isnull);

		if (!isnull && DatumGetObjectId(view) == relid)
			result = TextDatumGetCString(heap_getattr(tup, name_att, RelationGetDescr(rel), &isnull));
	}
	table_endscan(scan);
	UnregisterSnapshot(snapshot);
	table_close(rel, AccessShareLock);
	return result;
}

/* The error for DDL that would change or replace a source's view. */
static void
refuse_source_view_change(Oid relid, const char *source)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_IN_USE),
			 errmsg("cannot alter view \"%s\" because it is the view of streaming source \"%s\"",
					get_rel_name(relid), source),
			 errdetail("Its columns are the source's, and its streams read the source by its name."),
			 errhint("To change the source, drop it with streaming.drop_source('%s') and create it again.",
					 source)));
}

/*
 * ALTER VIEW (or ALTER TABLE) of every form, RENAME, SET SCHEMA and CREATE
 * OR REPLACE VIEW of a source's view, by its owner, are refused (the
 * relation rv names, if it exists).  Others get PostgreSQL's own error, so
 * a role that may not see the source learns nothing of it.
 */
static void
check_source_view_ddl(RangeVar *rv)
{
	Oid			relid;
	char	   *source;

	if (rv == NULL || !extension_installed())
		return;
	relid = RangeVarGetRelid(rv, NoLock, true);
	if (!OidIsValid(relid) || !pg_class_ownercheck(relid, GetUserId()))
		return;
	source = source_of_view(relid);
	if (source)
		refuse_source_view_change(relid, source);
}

/* The relation a DDL statement changes in place, if it can be a view. */
static RangeVar *
altered_relation(Node *parsetree)
{
	switch (nodeTag(parsetree))
	{
		case T_AlterTableStmt:
			return ((AlterTableStmt *) parsetree)->relation;
		case T_RenameStmt:
			return ((RenameStmt *) parsetree)->relation;
		case T_AlterObjectSchemaStmt:
			return ((AlterObjectSchemaStmt *) parsetree)->relation;
		case T_ViewStmt:
			return ((ViewStmt *) parsetree)->replace ? ((ViewStmt *) parsetree)->view : NULL;
		default:
			return NULL;
	}
}

/*
 * The drop of a source's view, whichever statement drops it: refused, but
 * for drop_source (which deleted the source's row first), the extension's
 * own drop, and PostgreSQL's internal clean-ups (temporary schemas).
 */
static void
stm_object_access(ObjectAccessType access, Oid classId, Oid objectId, int subId, void *arg)
{
	if (prev_object_access)
		prev_object_access(access, classId, objectId, subId, arg);
	if (access == OAT_DROP && classId == RelationRelationId && subId == 0 &&
		!dropping_extension &&
		!(((ObjectAccessDrop *) arg)->dropflags & PERFORM_DELETION_INTERNAL))
	{
		char	   *source = source_of_view(objectId);
		ObjectAddress view;

		ObjectAddressSet(view, RelationRelationId, objectId);
		/* worded as PostgreSQL's own for an extension's member */
		if (source)
			ereport(ERROR,
					(errcode(ERRCODE_DEPENDENT_OBJECTS_STILL_EXIST),
					 errmsg("cannot drop %s because streaming source \"%s\" requires it",
							getObjectDescription(&view, false), source),
					 errhint("Drop the source with streaming.drop_source('%s'), after the streams that read it.",
							 source)));
	}
}

/* Does this DROP EXTENSION or DROP OWNED drop the streaming extension? */
static bool
drops_extension(Node *parsetree)
{
	ListCell   *lc;

	if (IsA(parsetree, DropStmt) && ((DropStmt *) parsetree)->removeType == OBJECT_EXTENSION)
	{
		foreach(lc, ((DropStmt *) parsetree)->objects)
			if (strcmp(strVal(lfirst(lc)), "streaming") == 0)
				return true;
	}
	else if (IsA(parsetree, DropOwnedStmt) && extension_installed())
	{
		char	   *owner = stm_catalog_text("SELECT extowner FROM pg_catalog.pg_extension WHERE extname = $1",
											 TEXTOID, CStringGetTextDatum("streaming"));
		Oid			extowner = owner ? atooid(owner) : InvalidOid;

		foreach(lc, ((DropOwnedStmt *) parsetree)->roles)
			if (get_rolespec_oid(lfirst(lc), true) == extowner)
				return true;
	}
	return false;
}

/* The next hook's, or PostgreSQL's own processing. */
static void
run_standard(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
			 ProcessUtilityContext context, ParamListInfo params,
			 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	if (prev_process_utility)
		prev_process_utility(pstmt, queryString, readOnlyTree, context, params,
							 queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);
}

static void
stm_process_utility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					ProcessUtilityContext context, ParamListInfo params,
					QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *parsetree = pstmt->utilityStmt;

	if (IsA(parsetree, DropStmt) && ((DropStmt *) parsetree)->removeType == OBJECT_EXTENSION)
	{
		ListCell   *lc;

		foreach(lc, ((DropStmt *) parsetree)->objects)
			if (strcmp(strVal(lfirst(lc)), "streaming") == 0 && extension_installed())
				stop_all_workers();
	}
	else if (IsA(parsetree, DropRoleStmt))
		check_drop_role((DropRoleStmt *) parsetree);
	else if (IsA(parsetree, DropOwnedStmt) && extension_installed())
		drop_owned((DropOwnedStmt *) parsetree);
	else if (IsA(parsetree, ReassignOwnedStmt) && extension_installed())
		reassign_owned((ReassignOwnedStmt *) parsetree);
	else
		check_source_view_ddl(altered_relation(parsetree));

	if (drops_extension(parsetree))
	{
		bool		was = dropping_extension;

		dropping_extension = true;
		PG_TRY();
		{
			run_standard(pstmt, queryString, readOnlyTree, context, params,
						 queryEnv, dest, qc);
		}
		PG_FINALLY();
		{
			dropping_extension = was;
		}
		PG_END_TRY();
	}
	else
		run_standard(pstmt, queryString, readOnlyTree, context, params,
					 queryEnv, dest, qc);
}

void
stm_utility_init(void)
{
	prev_process_utility = ProcessUtility_hook;
	ProcessUtility_hook = stm_process_utility;
	prev_object_access = object_access_hook;
	object_access_hook = stm_object_access;
}
