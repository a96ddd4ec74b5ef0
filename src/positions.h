/*
 * positions.h: where a stream reads next in each part of its source
 * (streaming.positions), read and written for every source kind here.
 *
 * A part is what a source orders its records in, named by a text and
 * numbered within it: a Kafka partition (the topic, the partition), a rate
 * source's partition (the source's name, the partition), a file waiting to
 * be read (its name, 0), a replication slot (its name, 0).  position is the
 * next place to read in the part and end_position how far the part went
 * when the stream last looked, both in the part's own unit (an offset, a
 * byte, a count of values, an LSN), so that a part's lag is their
 * difference whatever the kind.  What else a kind must keep to resume a
 * part goes into detail (jsonb).
 *
 * Writes belong in the batch's transaction (that is what makes a batch
 * exactly-once); every call runs as the extension's owner (catalog.c).
 */
#ifndef STM_POSITIONS_H
#define STM_POSITIONS_H

#include "nodes/pg_list.h"

/* One part's row of streaming.positions. */
typedef struct StmPosition
{
	char	   *part;			/* a topic, a source's name, a file's name */
	int32		part_no;		/* the partition within part; 0 when it has none */
	int64		position;		/* where the stream reads next, in the part's unit */
	bool		has_end;		/* end_position is known (else NULL) */
	int64		end_position;	/* how far the part went when last planned */
	char	   *detail;			/* jsonb text of what else the kind keeps; NULL: none */
} StmPosition;

extern StmPosition *stm_position_make(const char *part, int32 part_no, int64 position,
									  int64 end_position);
extern List *stm_positions_read(int32 stream_id, const char *source);
extern void stm_positions_write(int32 stream_id, const char *source, List *positions);
extern void stm_positions_replace(int32 stream_id, const char *source, List *positions);
extern bool stm_positions_reached(int32 stream_id, const char *source, List *targets);
extern void stm_positions_forget(int32 stream_id);
extern void stm_positions_keep(int32 stream_id);

#endif
