/*
 * session.h: session windows of one group, kept as a sorted list of
 * disjoint sessions [start, end) (SPEC 3: a session is [first ts,
 * last ts + gap); sessions that overlap or touch merge).
 */
#ifndef STM_SESSION_H
#define STM_SESSION_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"

#include "aggregate.h"

/* A stored session that a session of the batch absorbed. */
typedef struct StmStoredSession
{
	bytea	   *key;			/* its group_key in the state table */
	TimestampTz start;			/* its window start in the sink */
} StmStoredSession;

typedef struct StmSession
{
	TimestampTz start;
	TimestampTz end;
	StmAggValue *vals;			/* the aggregates' states, NULL when not kept */
	bool		from_batch;		/* holds rows of this batch */
	List	   *stored;			/* StmStoredSession: stored sessions merged into it */
} StmSession;

typedef struct StmSessionList
{
	StmSession *items;			/* sorted by start; no two overlap or touch */
	int			n;
	int			cap;
} StmSessionList;

extern StmSession *stm_session_add_row(StmSessionList *list, TimestampTz start,
									   TimestampTz end, StmAggRuntime *rt);
extern void stm_session_add_stored(StmSessionList *list, TimestampTz start, TimestampTz end,
								   StmAggValue *vals, bytea *key, StmAggRuntime *rt);

#endif
