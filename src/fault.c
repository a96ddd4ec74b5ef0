/*
 * fault.c: fault points for tests (fault.h), compiled only with
 * `make FAULT_INJECTION=1`.
 */
#include "postgres.h"

#ifdef STM_FAULT_INJECTION

#include <signal.h>

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

#include "fault.h"
#include "interrupts.h"

static char *test_fault = NULL;

static const char *const fault_points[] = {
	"after_fetch", "after_parse", "after_sink_write", "before_commit",
	"after_commit", "after_dead_letter", "before_watermark_update", "mid_file",
	"helper_chunk", NULL
};

/* 'point:action[:arg]', every part known */
static bool
check_test_fault(char **newval, void **extra, GucSource source)
{
	char	   *copy;
	char	   *action;
	char	   *arg;
	bool		known = false;

	if (*newval == NULL || **newval == '\0')
		return true;
	copy = pstrdup(*newval);
	action = strchr(copy, ':');
	if (action == NULL)
	{
		GUC_check_errdetail("Use point:action[:arg].");
		return false;
	}
	*action++ = '\0';
	arg = strchr(action, ':');
	if (arg)
		*arg++ = '\0';
	for (int i = 0; fault_points[i]; i++)
		known |= strcmp(copy, fault_points[i]) == 0;
	if (!known)
	{
		GUC_check_errdetail("Unknown fault point \"%s\".", copy);
		return false;
	}
	if (strcmp(action, "sleep") == 0 ? (arg == NULL || atoi(arg) <= 0) :
		(arg != NULL || (strcmp(action, "error") != 0 && strcmp(action, "fatal") != 0 &&
						 strcmp(action, "kill9") != 0 && strcmp(action, "exit1") != 0)))
	{
		GUC_check_errdetail("The actions are error, fatal, sleep:SECONDS, kill9 and exit1.");
		return false;
	}
	return true;
}

void
stm_fault_init(void)
{
	DefineCustomStringVariable("streaming.test_fault",
							   "A fault to inject at a point of a batch (test builds only).",
							   "point:action[:arg]; see src/fault.h.",
							   &test_fault, "", PGC_SUSET, 0,
							   check_test_fault, NULL, NULL);
}

void
stm_fault_point(const char *point)
{
	size_t		len = strlen(point);
	const char *action;

	if (test_fault == NULL || strncmp(test_fault, point, len) != 0 || test_fault[len] != ':')
		return;
	action = test_fault + len + 1;
	ereport(LOG, (errmsg("streaming fault point reached: %s", point)));
	if (strcmp(action, "error") == 0)
		ereport(ERROR, (errmsg("streaming fault injected at %s", point)));
	else if (strcmp(action, "fatal") == 0)
		ereport(FATAL, (errmsg("streaming fault injected at %s", point)));
	else if (strcmp(action, "kill9") == 0)
		kill(MyProcPid, SIGKILL);
	else if (strcmp(action, "exit1") == 0)
		proc_exit(1);
	else if (strncmp(action, "sleep:", 6) == 0)
	{
		TimestampTz end = TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
													  atoi(action + 6) * 1000);

		while (GetCurrentTimestamp() < end)
		{
			pg_usleep(10 * 1000L);
			stm_check_for_interrupts();
		}
	}
}

#endif							/* STM_FAULT_INJECTION */
