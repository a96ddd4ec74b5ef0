/*
 * streaming.c: the library's entry point.
 *
 * Settings, the source and sink kinds, the SQL API's hooks; without
 * shared_preload_libraries the SQL API and run_batch still work; when
 * preloaded, shared memory and the launcher are set up too (SPEC 1).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "api.h"
#include "fault.h"
#include "guc.h"
#include "launcher.h"
#include "shmem.h"
#include "sink.h"
#include "source_file.h"
#include "sink_kafka.h"
#include "source_kafka.h"
#include "source_rate.h"
#include "utility.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

void
_PG_init(void)
{
	/* before stm_guc_init reserves the prefix: a test build's extra setting */
#ifdef STM_FAULT_INJECTION
	stm_fault_init();
#endif
	stm_guc_init();
	stm_source_register(&stm_kafka_source);
	stm_source_register(&stm_rate_source);
	stm_source_register(&stm_file_source);
	stm_sink_register(&stm_table_sink_routine);
	stm_sink_register(&stm_function_sink_routine);
	stm_sink_register(&stm_kafka_sink_routine);
	stm_api_init();
	stm_utility_init();
	if (process_shared_preload_libraries_in_progress)
	{
		stm_shmem_install_hooks();
		stm_launcher_register();
	}
}
