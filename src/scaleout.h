/*
 * scaleout.h: past one server (SPEC 8).  A Kafka source's share of the
 * partitions ('i/n': the partitions p with p % n = i), changed with
 * streaming.alter_kafka_source, and a stream's share moved between servers
 * with its positions and state (streaming.export_share, import_share).
 * Combining the partial states of several servers is combine.h's.
 */
#ifndef STM_SCALEOUT_H
#define STM_SCALEOUT_H

#include "catalog.h"

/* The partitions p with residues[p % modulus]: "i/n", or "i,j,.../n". */
typedef struct StmPartitionShare
{
	int32		modulus;
	bool	   *residues;		/* modulus entries */
} StmPartitionShare;

#define STM_SHARE_MAX_MODULUS 100000

extern StmPartitionShare *stm_share_parse(const char *text);
extern bool stm_share_contains(const StmPartitionShare *share, int32 partition);
extern char *stm_share_format(const StmPartitionShare *share);

/* start and run_batch refuse a stream whose share was exported */
extern void stm_scaleout_check_runnable(StmStreamDef *def);

#endif
