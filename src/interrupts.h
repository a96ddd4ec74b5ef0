/*
 * interrupts.h: interrupts and latch waits of every process that runs a
 * stream's batches (its worker, a parallel helper, a backend in run_batch).
 */
#ifndef STM_INTERRUPTS_H
#define STM_INTERRUPTS_H

/* a worker told to stop gives up its batch after this long (SPEC: stop within 2 s) */
#define STM_SHUTDOWN_GRACE_MS 1000

extern void stm_check_for_interrupts(void);
extern void stm_sleep(long ms);

#endif
