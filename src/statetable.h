/*
 * statetable.h: what the stateful operators share: their tables in schema
 * streaming, and hash tables keyed by binary group or dedup keys.
 */
#ifndef STM_STATETABLE_H
#define STM_STATETABLE_H

#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/hsearch.h"

extern void stm_statetable_create(const char *relname, const char *columns,
								  const char *index_column, const char *index2_columns,
								  Oid owner);
extern int64 stm_statetable_rows(const char *table);
extern HTAB *stm_keyhash_create(const char *name, Size entrysize, MemoryContext cxt);
extern void stm_key_init(StringInfo buf);
extern void stm_key_append(StringInfo buf, FmgrInfo *send, Datum value, bool isnull);
extern bytea *stm_key_finish(StringInfo buf);
extern void stm_late_row_keep(const char *stream, Datum *values, bool *nulls,
							  int meta_att, int event_time_att);

#endif
