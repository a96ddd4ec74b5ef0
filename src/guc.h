/*
 * guc.h: the streaming.* configuration settings.
 */
#ifndef STM_GUC_H
#define STM_GUC_H

extern int	stm_guc_max_workers;
extern int	stm_guc_naptime_ms;
extern int	stm_guc_batch_memory_kb;
extern bool stm_guc_log_batches;
extern int	stm_guc_max_retries;
extern int	stm_guc_retry_delay_ms;
extern int	stm_guc_progress_history;
extern int	stm_guc_max_record_size;
extern int	stm_guc_kafka_timeout_ms;
extern int	stm_guc_file_settle_time_ms;
extern int	stm_guc_outbox_max_rows;
extern int	stm_guc_max_parallel_workers_per_stream;
extern int	stm_guc_helper_cpus;

extern void stm_guc_init(void);

/*
 * streaming.batch_memory is split in two: half bounds the Kafka client's
 * prefetch (source_kafka.c), half the batch's in-memory groups (aggstate.c).
 */
static inline Size
stm_guc_groups_memory(void)
{
	return (Size) stm_guc_batch_memory_kb * 1024 / 2;
}

#endif
