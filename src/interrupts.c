/*
 * interrupts.c: interrupts and latch waits (interrupts.h).
 *
 * The long waits of a batch (a source's or sink's calls to its client,
 * made in slices, and the fault points' sleeps) check here between slices,
 * so that a worker told to stop (SIGTERM: stop(), DROP EXTENSION, a server
 * shutdown) gives its batch up within STM_SHUTDOWN_GRACE_MS whatever the
 * brokers do; elsewhere only the usual interrupts apply.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "storage/latch.h"
#include "utils/timestamp.h"
#include "utils/wait_event.h"

#include "interrupts.h"

/*
 * Interrupts as anywhere; in a worker told to stop, the batch in flight
 * is given up once it has had STM_SHUTDOWN_GRACE_MS to finish (it rolls
 * back: its records are read again by the next run).
 */
void
stm_check_for_interrupts(void)
{
	static TimestampTz noticed = 0;

	CHECK_FOR_INTERRUPTS();
	if (!ShutdownRequestPending)
		return;
	if (noticed == 0)
		noticed = GetCurrentTimestamp();
	else if (TimestampDifferenceExceeds(noticed, GetCurrentTimestamp(), STM_SHUTDOWN_GRACE_MS))
		ereport(ERROR,
				(errcode(ERRCODE_ADMIN_SHUTDOWN),
				 errmsg("the stream's worker is stopping: the batch in flight is rolled back")));
}

/* Sleep for ms, or until the latch is set (the postmaster's death ends the process). */
void
stm_sleep(long ms)
{
	if (ms <= 0)
		return;
	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms,
					 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}
