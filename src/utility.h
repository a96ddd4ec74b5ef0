/*
 * utility.h: the extension's part in PostgreSQL's DDL (DROP EXTENSION,
 * DROP ROLE, DROP OWNED, REASSIGN OWNED).
 */
#ifndef STM_UTILITY_H
#define STM_UTILITY_H

extern void stm_utility_init(void);

#endif
