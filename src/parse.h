/*
 * parse.h: decoding one record (a message's value, a line of a file)
 * into the typed columns a source declares.
 */
#ifndef STM_PARSE_H
#define STM_PARSE_H

#include "access/tupdesc.h"
#include "fmgr.h"

typedef enum StmFormat
{
	STM_FORMAT_NONE,			/* no payload: every column is metadata */
	STM_FORMAT_JSON,
	STM_FORMAT_CSV,
	STM_FORMAT_TEXT,
	STM_FORMAT_BYTES
} StmFormat;

typedef struct StmParser
{
	StmFormat	format;
	bool		has_columns;	/* json: declared columns, else one jsonb value */
	char		delimiter;		/* csv */
	int			ncols;
	char	  **names;
	int		   *name_lens;
	Oid		   *types;
	int32	   *typmods;
	FmgrInfo   *infuncs;
	Oid		   *ioparams;
	bool	   *wants_json;		/* column of type json/jsonb: keep JSON text */
	char	  **fields;			/* one text per column, in scratch */
	MemoryContext scratch;		/* reset per record: lexing and splitting */
} StmParser;

extern StmFormat stm_parse_format(const char *format);
extern void stm_parser_init(StmParser *p, StmFormat format, bool has_columns,
							char delimiter, TupleDesc desc, int ncols);
extern void stm_parse_record(StmParser *p, const char *data, int len,
							 Datum *values, bool *nulls);
extern void stm_parse_fields(StmParser *p, char **fields, int nfields,
							 const char *data, int len, Datum *values, bool *nulls);

#endif
