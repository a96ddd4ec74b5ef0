/*
 * combine.h: a stream's partial states read from other servers (SPEC 8):
 * their layout (streaming.partial_states), the aggregate that combines and
 * finalizes them (streaming.combine_partial), and combine_view.
 */
#ifndef STM_COMBINE_H
#define STM_COMBINE_H

#include "query.h"

extern char *stm_combine_layout(StmAggQuery *agg, Oid state_table);
extern Oid	stm_combine_state_table(int32 stream_id);
extern void stm_combine_check_trusted_states(List *aggrefs, const char *whence);

#endif
