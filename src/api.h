/*
 * api.h: what the SQL functions (api_*.c) share: argument checks, the
 * commit-time actions they queue, and the stream lock.
 *
 *   api_args.c     checking arguments, running generated SQL
 *   api_source.c   create_*_source, drop_source
 *   api_sink.c     create_*_sink, drop_*_sink (named sinks: streaming.sinks)
 *   api_stream.c   create_stream, drop_stream
 *   api_control.c  start, stop, reset, run_batch, process_available,
 *                  worker_pids; the commit-time wake-up of the launcher
 */
#ifndef STM_API_H
#define STM_API_H

#include "fmgr.h"
#include "utils/jsonb.h"

#include "catalog.h"

#define STM_ADVISORY_LOCK_CLASS 0x53544d00	/* "STM\0": first key of stream locks */

/* api_args.c */
typedef struct StmArgErrorContext
{
	const char *argname;
	const char *text;
} StmArgErrorContext;

extern void stm_arg_error_callback(void *arg);

/* errors inside point into the argument's text and name the argument */
#define STM_ARG_ERRCONTEXT_BEGIN(argname_, text_) \
	do { \
		StmArgErrorContext argctx_ = {(argname_), (text_)}; \
		ErrorContextCallback errcb_; \
		errcb_.callback = stm_arg_error_callback; \
		errcb_.arg = &argctx_; \
		errcb_.previous = error_context_stack; \
		error_context_stack = &errcb_;
#define STM_ARG_ERRCONTEXT_END() \
		error_context_stack = errcb_.previous; \
	} while (0)

/* a SQL function's arguments, read by name */
typedef struct StmArgs
{
	FunctionCallInfo fcinfo;
	int			nargs;
	char	  **names;
} StmArgs;

extern void stm_args_init(StmArgs *args, FunctionCallInfo fcinfo);
extern bool stm_args_given(StmArgs *args, const char *name);
extern Datum stm_args_datum(StmArgs *args, const char *name, bool required);
extern char *stm_args_text(StmArgs *args, const char *name, bool required);
extern char *stm_args_keyword(StmArgs *args, const char *name, bool required);
extern bool stm_args_bool(StmArgs *args, const char *name);

extern void stm_arg_require(FunctionCallInfo fcinfo, int argno, const char *argname);
extern char *stm_arg_text(FunctionCallInfo fcinfo, int argno);
extern char *stm_arg_name(FunctionCallInfo fcinfo);
extern bool stm_arg_bool(FunctionCallInfo fcinfo, int argno, const char *argname);
extern char *stm_arg_keyword(FunctionCallInfo fcinfo, int argno);
extern char *stm_arg_lower(const char *value);
extern void stm_arg_check_choice(const char *argname, const char *value,
								 const char *const *choices, const char *hint);
extern void stm_arg_check_name(const char *what, const char *name);
extern bool stm_arg_check_sql(const char *sql, Oid argtype, Datum arg);
extern bool stm_arg_parses_as(const char *str, Oid typid);
extern void stm_api_exec(const char *sql, int nargs, Oid *types, Datum *values,
						 const char *nulls, int expect);
extern Jsonb *stm_api_arguments_as_options(FunctionCallInfo fcinfo);

/* api_control.c */
extern void stm_api_init(void);
extern void stm_api_want_on_commit(int32 stream_id, Oid owner);
extern void stm_api_want_again_on_abort(int32 stream_id, Oid owner);
extern void stm_api_require_workers(const char *stream);
extern void stm_api_stop_worker(StmStreamDef *def);

/* api_source.c, api_sink.c, api_stream.c */
extern void stm_api_drop_source(StmSourceDef *src);
extern void stm_api_drop_sink(StmSinkDef *sink);
extern bool stm_api_sink_in_use(const char *sink);
extern void stm_api_drop_stream(StmStreamDef *def, bool drop_sink, bool force);
extern void stm_api_clear_state_tables(int32 stream_id, bool drop);

#endif
