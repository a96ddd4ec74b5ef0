/*
 * window.h: the window calls of stream queries (SPEC 3):
 * streaming.tumble, streaming.hop, streaming.session, and
 * streaming.window_start() / streaming.window_end() in the select list.
 */
#ifndef STM_WINDOW_H
#define STM_WINDOW_H

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "nodes/primnodes.h"

typedef enum StmWindowKind
{
	STM_WINDOW_NONE,
	STM_WINDOW_TUMBLE,
	STM_WINDOW_HOP,
	STM_WINDOW_SESSION,
	STM_WINDOW_START,			/* window_start() */
	STM_WINDOW_END				/* window_end() */
} StmWindowKind;

/* A window call of a stream's GROUP BY, with its constant arguments checked. */
typedef struct StmWindowSpec
{
	StmWindowKind kind;
	Expr	   *ts;				/* the event-time expression */
	int64		size_us;		/* tumble, hop: size; session: gap */
	int64		slide_us;		/* hop */
	TimestampTz origin;			/* tumble, hop */
} StmWindowSpec;

extern StmWindowKind stm_window_kind(Oid funcid);
extern void stm_window_spec(FuncExpr *call, StmWindowSpec *spec);

#endif
