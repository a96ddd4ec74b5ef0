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

/* How a column's text becomes a Datum (parse.c: convert_fields). */
typedef enum StmInputKind
{
	STM_INPUT_FUNCTION,			/* the type's input function, through fmgr */
	STM_INPUT_INT2,				/* int2in's own call: pg_strtoint16 */
	STM_INPUT_INT4,				/* pg_strtoint32 */
	STM_INPUT_INT8,				/* pg_strtoint64 */
	STM_INPUT_FLOAT8,			/* float8in_internal */
	STM_INPUT_TEXT,				/* cstring_to_text_with_len */
	STM_INPUT_TIMESTAMPTZ,		/* RFC 3339 with an offset (rfc3339.c), else fmgr */
	STM_INPUT_TIMESTAMP			/* RFC 3339 (rfc3339.c), else fmgr */
} StmInputKind;

/* A key seen at one position of the last JSON record, and its column. */
typedef struct StmKeySlot
{
	char		key[64];
	int			len;			/* -1: nothing cached at this position */
	int			column;			/* -1: not a declared column */
} StmKeySlot;

#define STM_KEY_SLOTS 32

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
	StmInputKind *kinds;
	char	  **fields;			/* one text per column, in buf or scratch */
	int		   *field_lens;		/* their lengths, -1: unknown (strlen) */
	char	   *buf;			/* the record's copy, NUL-terminated, reused */
	int			buf_size;
	int			encoding;		/* the database's */
	StmKeySlot	keys[STM_KEY_SLOTS];	/* JSON keys by position, as last seen */
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
