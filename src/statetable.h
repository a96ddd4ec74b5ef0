/*
 * statetable.h: what the stateful operators share: their tables in schema
 * streaming, and hash tables keyed by binary group or dedup keys.
 */
#ifndef STM_STATETABLE_H
#define STM_STATETABLE_H

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"

#include "source.h"

/* late_rows => 'keep': where a stateful operator writes the rows it drops */
typedef struct StmLateRows
{
	int32		stream_id;
	StmSource  *src;			/* tells a row's position from its metadata */
	int			meta_att;		/* the first metadata column of a source row */
	/* a parallel helper's: hands the row on to its leader instead of writing it */
	void		(*forward) (void *arg, const char *position, Datum event_time, bool isnull);
	void	   *forward_arg;
} StmLateRows;

/* state-table statements run as the extension's owner (stm_statetable_begin) */
typedef struct StmStateAccess
{
	Oid			save_userid;
	int			save_sec_context;
} StmStateAccess;

extern void stm_statetable_create(const char *relname, const char *columns,
								  const char *index_column, const char *index2_columns,
								  Oid owner);
extern StmStateAccess stm_statetable_begin(void);
extern void stm_statetable_end(StmStateAccess access);
extern int64 stm_statetable_rows(const char *table);
extern int64 stm_statetable_rows_after(const char *table, bool known, int64 prev, int64 delta);
extern bool stm_statetable_stored_rows(Jsonb *stored, const char *table, int64 *rows);
extern void stm_statetable_store_rows(StringInfo json, const char *table, int64 rows);
extern HTAB *stm_keyhash_create(const char *name, Size entrysize, MemoryContext cxt);
extern void stm_key_init(StringInfo buf);
extern void stm_key_append(StringInfo buf, FmgrInfo *send, Datum value, bool isnull);
extern bytea *stm_key_finish(StringInfo buf);
extern void stm_late_row_keep(StmLateRows *late, Datum *values, bool *nulls,
							  int event_time_att);
extern void stm_late_row_store(int32 stream_id, const char *position, Datum event_time,
							   bool isnull);

#endif
