/*
 * schema_registry.h: a client of a Confluent schema registry (SPEC 2.1.1),
 * the REST subset Avro sources and sinks use, over libcurl.
 */
#ifndef STM_SCHEMA_REGISTRY_H
#define STM_SCHEMA_REGISTRY_H

#include "utils/jsonb.h"

typedef struct StmRegistry StmRegistry;

/*
 * A schema as the registry gave it: its id and its text (JSON).  found is
 * false when the registry does not know it (the id, or the subject).
 */
typedef struct StmRegistrySchema
{
	bool		found;
	int32		id;
	char	   *text;
} StmRegistrySchema;

/* create time: the schema_registry argument (an object: url, basic_auth) */
extern void stm_registry_check_options(Jsonb *registry);

/*
 * A client for the registry that options (the schema_registry argument, as
 * stored) name, in the current memory context (its connection goes with
 * it).  what names its user in errors ("source \"orders\"").
 */
extern StmRegistry *stm_registry_open(Jsonb *registry, const char *what);
extern const char *stm_registry_url(StmRegistry *reg);

/*
 * The registry's calls.  A registry that cannot be reached, or answers with
 * an error of its own, raises a class 08 error (the caller waits and
 * retries); one that does not know the id or subject returns found = false.
 */
extern StmRegistrySchema stm_registry_schema_by_id(StmRegistry *reg, int32 id);
extern StmRegistrySchema stm_registry_latest(StmRegistry *reg, const char *subject);
extern int32 stm_registry_register(StmRegistry *reg, const char *subject, const char *schema);

#endif
