/*
 * batch.h: one micro-batch of a stream, in one transaction (batch.c); what
 * it keeps between batches is the runtime's (runtime.h).
 */
#ifndef STM_BATCH_H
#define STM_BATCH_H

#include "parallel.h"
#include "runtime.h"

extern int64 stm_batch_run(StmRuntime *rt);
extern int64 stm_batch_run_locked(StmRuntime *rt, StmStreamDef *def);
extern void stm_batch_run_share(StmRuntime *rt, const char *bounds, StmHelperOut *out,
								StmShareTotals *totals);
extern bool stm_error_is_permanent(int sqlerrcode);
extern bool stm_error_is_waiting(int sqlerrcode);

#endif
