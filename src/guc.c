/*
 * guc.c: every streaming.* setting lives here.
 *
 * Resource limits are the administrator's (SPEC 7): every setting is
 * PGC_SIGHUP (postgresql.conf, reaches the workers on reload) or PGC_SUSET
 * (also settable by superusers in a session, e.g. around run_batch), never
 * something an ordinary role can raise for itself or its workers.
 * streaming.max_workers sizes shared memory and so needs a restart.
 */
#include "postgres.h"

#include <limits.h>

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "guc.h"
#include "parallel.h"

int			stm_guc_max_workers = 8;
int			stm_guc_naptime_ms = 1000;
int			stm_guc_batch_memory_kb = 65536;
bool		stm_guc_log_batches = false;
int			stm_guc_max_retries = 5;
int			stm_guc_retry_delay_ms = 1000;
int			stm_guc_progress_history = 1000;
int			stm_guc_max_record_size = 1024 * 1024;
int			stm_guc_kafka_timeout_ms = 10000;
int			stm_guc_file_settle_time_ms = 2000;
int			stm_guc_outbox_max_rows = 1000000;
/*
 * An automatic stream (parallel_workers NULL) that finds no free slot for
 * its helpers runs with fewer or none, and its helpers give their slots
 * back to a stream's worker that found none (runtime.c): safe as a default.
 */
int			stm_guc_max_parallel_workers_per_stream = 2;
/* 0: the CPUs the process may run on (runtime.c); tests fix it */
int			stm_guc_helper_cpus = 0;

void
stm_guc_init(void)
{
	/* sizes shared memory: only exists when preloaded (else it would be FATAL) */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("streaming.max_workers",
								"Maximum number of streams that run in background workers at once.",
								"Each running stream uses one background worker; max_worker_processes must leave room for them and the launcher.",
								&stm_guc_max_workers, 8, 0, 1024,
								PGC_POSTMASTER, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.naptime",
							"How long an idle stream worker sleeps before it polls its source again.",
							NULL,
							&stm_guc_naptime_ms, 1000, 10, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);

	/* superuser only (SPEC 7), and settable per session for run_batch */
	DefineCustomIntVariable("streaming.batch_memory",
							"Memory a batch may use: half for the records fetched ahead, half for its groups.",
							"The Kafka client's prefetch gets half, shared by the partitions; the aggregate groups a batch keeps in memory get the other half, and are merged into the state table whenever they exceed it.",
							&stm_guc_batch_memory_kb, 65536, 1024, INT_MAX / 2,
							PGC_SUSET, GUC_UNIT_KB, NULL, NULL, NULL);

	/* superuser only: it decides how many background workers a stream takes */
	DefineCustomIntVariable("streaming.max_parallel_workers_per_stream",
							"Most parallel helpers a stream with parallel_workers NULL (automatic) starts.",
							"A stream whose parallel_workers is set uses that number instead; 0 here means automatic streams run without helpers.",
							&stm_guc_max_parallel_workers_per_stream, 2, 0, STM_MAX_PARALLEL_WORKERS,
							PGC_SUSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.helper_cpus",
							"CPUs that automatic parallel helpers are planned for: at most one automatic helper per CPU, none on one CPU.",
							"0 (the default) counts the CPUs the server may run on: its CPU affinity, lowered by a cgroup v2 CPU quota. A stream whose parallel_workers is set is not affected.",
							&stm_guc_helper_cpus, 0, 0, 1024,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomBoolVariable("streaming.log_batches",
							 "Log one line per committed batch.",
							 NULL,
							 &stm_guc_log_batches, false,
							 PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.max_retries",
							"Failed batches are retried this many times, with exponential backoff, before the stream's status becomes failed.",
							NULL,
							&stm_guc_max_retries, 5, 0, 1000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.retry_delay",
							"Delay before the first retry of a failed batch; it doubles with each further failure, up to one minute.",
							NULL,
							&stm_guc_retry_delay_ms, 1000, 1, 3600 * 1000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.progress_history",
							"Number of committed batches per stream kept in streaming.progress.",
							NULL,
							&stm_guc_progress_history, 1000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.max_record_size",
							"Records larger than this are bad records.",
							NULL,
							&stm_guc_max_record_size, 1024 * 1024, 1, MaxAllocSize / 2,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);

	DefineCustomIntVariable("streaming.kafka_timeout",
							"How long a batch waits for the Kafka cluster before the stream is marked waiting and retried.",
							NULL,
							&stm_guc_kafka_timeout_ms, 10000, 100, 3600 * 1000,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);

	/* superuser only, and settable per session for run_batch (tests) */
	DefineCustomIntVariable("streaming.file_settle_time",
							"A file of a file source is read once its size and modification time have not changed for this long.",
							"A file written in place is taken only after it has been quiet this long; a file renamed into the directory is taken when its modification time is this old.",
							&stm_guc_file_settle_time_ms, 2000, 0, INT_MAX,
							PGC_SUSET, GUC_UNIT_MS, NULL, NULL, NULL);
	/* the outbox is on disk: the administrator's to bound (SPEC 6.1) */
	DefineCustomIntVariable("streaming.outbox_max_rows",
							"Most rows a stream's outbox (streaming.outbox) holds for its Kafka sink.",
							"A batch reads no more records than the outbox has room for, and while it is full (the brokers are down or slow) the stream waits; nothing is dropped.",
							&stm_guc_outbox_max_rows, 1000000, 1, INT_MAX,
							PGC_SUSET, 0, NULL, NULL, NULL);

	MarkGUCPrefixReserved("streaming");
}
