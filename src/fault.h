/*
 * fault.h: fault points for tests (issue 12).
 *
 * Built only with `make FAULT_INJECTION=1` (make test builds that way; a
 * plain build has neither the points nor the setting).  A superuser sets
 * streaming.test_fault = 'point:action[:arg]'; when a batch reaches that
 * point, the process logs "streaming fault point reached: <point>" and
 * acts: error, fatal, sleep:SECONDS (interruptible, as a long Kafka call
 * is), kill9 (SIGKILL to itself), exit1.
 *
 * The points: after_fetch, after_parse, after_sink_write, before_commit,
 * after_commit, after_dead_letter, before_watermark_update, mid_file,
 * helper_chunk (a parallel helper, after it sent a chunk's rows to its
 * leader: the middle of its share).
 */
#ifndef STM_FAULT_H
#define STM_FAULT_H

#ifdef STM_FAULT_INJECTION
extern void stm_fault_init(void);
extern void stm_fault_point(const char *point);
#define STM_FAULT_POINT(point) stm_fault_point(point)
#else
#define STM_FAULT_POINT(point) ((void) 0)
#endif

#endif
