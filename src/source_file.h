/*
 * source_file.h: the file source (SPEC 2.2); the rest is private to
 * source_file.c.
 */
#ifndef STM_SOURCE_FILE_H
#define STM_SOURCE_FILE_H

#include "source.h"

extern const StmSourceRoutine stm_file_source;

#endif
