/*
 * options.h: reading and writing a source's options (streaming.sources.options,
 * a jsonb object of its create function's arguments by name).
 */
#ifndef STM_OPTIONS_H
#define STM_OPTIONS_H

#include "datatype/timestamp.h"
#include "nodes/pg_list.h"
#include "utils/jsonb.h"

/* A key and its value as text (for objects of scalars). */
typedef struct StmOptionPair
{
	char	   *key;
	char	   *value;			/* NULL for a JSON null */
} StmOptionPair;

extern bool stm_option_given(Jsonb *options, const char *key);
extern char *stm_option_text(Jsonb *options, const char *key);
extern bool stm_option_bool(Jsonb *options, const char *key, bool dflt);
extern int64 stm_option_int64(Jsonb *options, const char *key, int64 dflt);
extern int64 stm_option_interval_ms(Jsonb *options, const char *key, int64 dflt);
extern Jsonb *stm_option_jsonb(Jsonb *options, const char *key);
extern List *stm_option_pairs(Jsonb *options, const char *key);
extern List *stm_option_elements(Jsonb *options, const char *key);
extern Jsonb *stm_option_set_text(Jsonb *options, const char *key, const char *value);

#endif
