/*
 * parse.h: decoding one record (a message's value, a line of a file)
 * into the typed columns a source declares.
 */
#ifndef STM_PARSE_H
#define STM_PARSE_H

#include "access/tupdesc.h"
#include "common/jsonapi.h"
#include "fmgr.h"

typedef enum StmFormat
{
	STM_FORMAT_NONE,			/* no payload: every column is metadata */
	STM_FORMAT_JSON,
	STM_FORMAT_CSV,
	STM_FORMAT_TEXT,
	STM_FORMAT_BYTES,
	STM_FORMAT_AVRO				/* the Confluent wire format (avro.c) */
} StmFormat;

/* What wraps a record's row (SPEC 2.1.2). */
typedef enum StmEnvelope
{
	STM_ENVELOPE_NONE,			/* the record is the row */
	STM_ENVELOPE_DEBEZIUM		/* a change event: before, after, op, ts_ms */
} StmEnvelope;

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

/*
 * What a text becomes: a column's type (or an array column's element
 * type), and how it is converted (convert_text in parse.c).
 */
typedef struct StmTextTarget
{
	Oid			type;
	int32		typmod;
	FmgrInfo	infunc;
	Oid			ioparam;
	StmInputKind kind;
	bool		wants_json;		/* json/jsonb: keep JSON text */
} StmTextTarget;

/* A key seen at one position of the last JSON record, and its column. */
typedef struct StmKeySlot
{
	char		key[64];
	int			len;			/* -1: nothing cached at this position */
	int			column;			/* -1: not a declared column */
} StmKeySlot;

#define STM_KEY_SLOTS 32

struct StmSource;
struct StmAvroParser;
struct StmDebeziumJson;

typedef struct StmParser
{
	StmFormat	format;
	StmEnvelope envelope;
	bool		has_columns;	/* json: declared columns, else one jsonb value */
	char		delimiter;		/* csv */
	int			ncols;			/* every column the parser fills: */
	int			nrow;			/* the row's (declared, or the one value column), then */
	int			cdc_op_col;		/* debezium: cdc_op text and */
	int			cdc_ts_col;		/* cdc_ts timestamptz (-1: none) */
	int			key_avro_col;	/* key_format avro: kafka_key_avro jsonb (-1: none) */
	char	  **names;
	int		   *name_lens;
	Oid		   *types;
	int32	   *typmods;
	StmTextTarget *targets;		/* per column: what its text becomes */
	char	  **fields;			/* one text per column, in buf or scratch */
	int		   *field_lens;		/* their lengths, -1: unknown (strlen) */
	char	   *buf;			/* the record's copy, NUL-terminated, reused */
	int			buf_size;
	int			encoding;		/* the database's */
	StmKeySlot	keys[STM_KEY_SLOTS];	/* JSON keys by position, as last seen */
	MemoryContext scratch;		/* reset per record: lexing and splitting */
	/* a change event (debezium): what the envelope said besides the row */
	char		cdc_op;			/* 'c', 'u', 'd', 'r' */
	bool		has_cdc_ts;
	int64		cdc_ts_ms;
	struct StmAvroParser *avro; /* format or key_format avro (avro.c) */
	struct StmDebeziumJson *debezium;	/* json + debezium (debezium.c) */
} StmParser;

extern StmFormat stm_parse_format(const char *format);
extern StmEnvelope stm_parse_envelope(const char *envelope);
extern void stm_parser_init(StmParser *p, const struct StmSource *src, TupleDesc desc,
							int ncols);
extern void stm_parse_record(StmParser *p, const char *data, int len,
							 Datum *values, bool *nulls);
extern void stm_parse_key(StmParser *p, const char *key, int len, Datum *values, bool *nulls);
extern void stm_text_target_init(StmTextTarget *t, Oid type, int32 typmod);
extern Datum stm_text_target_convert(StmTextTarget *t, char *f, int len);
extern void stm_parse_check_record_text(const char *data, int len);
extern void stm_json_walk(JsonLexContext *lex, void *state, json_struct_action container_start,
						  json_struct_action container_end, json_ofield_action field_start,
						  json_scalar_action scalar);
extern void stm_parse_fill_cdc(StmParser *p, Datum *values, bool *nulls);
extern void stm_parse_fields(StmParser *p, char **fields, int nfields,
							 const char *data, int len, Datum *values, bool *nulls);

#endif
