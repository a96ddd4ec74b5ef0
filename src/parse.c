/*
 * parse.c: turn one raw record into the Datums of a source's columns.
 *
 * JSON goes through PostgreSQL's own JSON lexer and parser (common/jsonapi.h)
 * with semantic actions that pick out the top-level keys of the declared
 * columns, so values are converted straight to their types without building
 * a jsonb first.  Every value is converted with its type's input function,
 * which gives the same results and error messages as a cast from text; for
 * a few built-in types, by the C function that input function calls
 * (pg_strtoint64 for int8in, ...), without fmgr in between.  timestamptz
 * and timestamp values in the exact RFC 3339 form (with an offset or Z for
 * timestamptz) are converted by rfc3339.c, every other text by the type's
 * input function.
 *
 * The common JSON record (flat, no escapes) costs no allocation but its
 * typed values: it is copied once into a buffer the parser keeps, its
 * values are terminated in place, and its keys are matched against the
 * keys seen at the same positions in the last record (records of a topic
 * nearly always share their key order).
 *
 * CSV: PostgreSQL's COPY parser works on a stream, not on one record whose
 * boundaries are given, so one record's fields (a Kafka message's) are
 * split here (RFC 4180: quotes, doubled quotes, delimiter inside quotes);
 * an unquoted empty field is NULL, as in COPY ... CSV.  A source that reads
 * a stream of records (a file, through COPY's own parser) hands the fields
 * it split, and stm_parse_fields only converts them.
 *
 * Avro (the Confluent wire format) is decoded by avro.c, and Debezium's
 * change events in JSON are taken apart by debezium.c; both hand their
 * texts back to the conversions here (stm_text_target_convert).
 *
 * Errors are raised with ereport; the batch catches them per record and
 * sends the record to the dead-letter table.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "common/jsonapi.h"
#include "lib/stringinfo.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "avro.h"
#include "debezium.h"
#include "guc.h"
#include "parse.h"
#include "catalog.h"
#include "rfc3339.h"
#include "source.h"

StmFormat
stm_parse_format(const char *format)
{
	if (strcmp(format, "json") == 0)
		return STM_FORMAT_JSON;
	if (strcmp(format, "csv") == 0)
		return STM_FORMAT_CSV;
	if (strcmp(format, "text") == 0)
		return STM_FORMAT_TEXT;
	if (strcmp(format, "bytes") == 0)
		return STM_FORMAT_BYTES;
	if (strcmp(format, "avro") == 0)
		return STM_FORMAT_AVRO;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized format \"%s\"", format),
			 errhint("Valid formats are \"json\", \"csv\", \"text\", \"bytes\" and \"avro\".")));
	return STM_FORMAT_JSON;		/* keep compiler quiet */
}

StmEnvelope
stm_parse_envelope(const char *envelope)
{
	if (envelope == NULL)
		return STM_ENVELOPE_NONE;
	if (strcmp(envelope, "debezium") == 0)
		return STM_ENVELOPE_DEBEZIUM;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized envelope \"%s\"", envelope),
			 errhint("The only envelope is \"debezium\".")));
	return STM_ENVELOPE_NONE;	/* keep compiler quiet */
}

/*
 * What a text of type (and typmod) becomes: its input function, or for a
 * few built-in types the C function that input function calls.
 */
void
stm_text_target_init(StmTextTarget *t, Oid type, int32 typmod)
{
	Oid			infunc;
	Oid			base = getBaseType(type);

	t->type = type;
	t->typmod = typmod;
	getTypeInputInfo(type, &infunc, &t->ioparam);
	fmgr_info(infunc, &t->infunc);
	t->wants_json = (base == JSONOID || base == JSONBOID);
	/* the type itself, not a domain over it (domain_in checks constraints) */
	switch (type)
	{
		case INT2OID:
			t->kind = STM_INPUT_INT2;
			break;
		case INT4OID:
			t->kind = STM_INPUT_INT4;
			break;
		case INT8OID:
			t->kind = STM_INPUT_INT8;
			break;
		case FLOAT8OID:
			t->kind = STM_INPUT_FLOAT8;
			break;
		case TEXTOID:
			t->kind = STM_INPUT_TEXT;
			break;
		case TIMESTAMPTZOID:
			t->kind = STM_INPUT_TIMESTAMPTZ;
			break;
		case TIMESTAMPOID:
			t->kind = STM_INPUT_TIMESTAMP;
			break;
		default:
			t->kind = STM_INPUT_FUNCTION;
			break;
	}
}

/*
 * Prepare a parser for the first ncols columns of desc, as source src
 * reads them: the row's columns (declared, or one value column), then the
 * envelope's and key's (cdc_op, cdc_ts, kafka_key_avro); the metadata
 * columns follow them and are filled by the source itself.
 */
void
stm_parser_init(StmParser *p, const StmSource *src, TupleDesc desc, int ncols)
{
	memset(p, 0, sizeof(*p));
	p->format = src->format;
	p->envelope = src->envelope;
	p->has_columns = src->has_columns;
	p->delimiter = src->csv_delimiter;
	p->ncols = ncols;
	p->nrow = ncols;
	p->key_avro_col = p->cdc_op_col = p->cdc_ts_col = -1;
	if (src->key_avro)
		p->key_avro_col = --p->nrow;
	if (p->envelope == STM_ENVELOPE_DEBEZIUM)
	{
		p->nrow -= 2;
		p->cdc_op_col = p->nrow;
		p->cdc_ts_col = p->nrow + 1;
	}
	p->names = palloc(sizeof(char *) * Max(ncols, 1));
	p->name_lens = palloc(sizeof(int) * Max(ncols, 1));
	p->types = palloc(sizeof(Oid) * Max(ncols, 1));
	p->typmods = palloc(sizeof(int32) * Max(ncols, 1));
	p->targets = palloc(sizeof(StmTextTarget) * Max(ncols, 1));
	p->fields = palloc0(sizeof(char *) * Max(ncols, 1));
	p->field_lens = palloc(sizeof(int) * Max(ncols, 1));
	p->buf_size = 1024;
	p->buf = palloc(p->buf_size);
	p->encoding = GetDatabaseEncoding();
	for (int i = 0; i < STM_KEY_SLOTS; i++)
		p->keys[i].len = -1;
	p->scratch = AllocSetContextCreate(CurrentMemoryContext, "streaming record",
									   ALLOCSET_DEFAULT_SIZES);
	for (int i = 0; i < ncols; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		p->names[i] = pstrdup(NameStr(att->attname));
		p->name_lens[i] = strlen(p->names[i]);
		p->types[i] = att->atttypid;
		p->typmods[i] = att->atttypmod;
		stm_text_target_init(&p->targets[i], att->atttypid, att->atttypmod);
	}
	if (p->format == STM_FORMAT_AVRO || src->key_avro)
		p->avro = stm_avro_parser_new(src->avro, p);
	if (p->format == STM_FORMAT_JSON && p->envelope == STM_ENVELOPE_DEBEZIUM)
		p->debezium = stm_debezium_json_new(p);
}

/* ---- JSON ---------------------------------------------------------------- */

typedef struct JsonRecordState
{
	StmParser  *p;
	JsonLexContext *lex;
	int			depth;			/* nesting depth of objects and arrays */
	int			column;			/* column of the current top-level key, or -1 */
	char	   *raw_start;		/* start of a nested value kept as JSON text */
} JsonRecordState;


/* The declared column named by a key of keylen bytes; guess is tried first. */
static int
column_of_token(StmParser *p, const char *key, int keylen, int guess)
{
	if (guess < p->nrow && p->name_lens[guess] == keylen &&
		memcmp(p->names[guess], key, keylen) == 0)
		return guess;
	for (int i = 0; i < p->nrow; i++)
		if (p->name_lens[i] == keylen && memcmp(p->names[i], key, keylen) == 0)
			return i;
	return -1;
}

/*
 * The column of the key at position pos of a flat record: the key seen at
 * that position in the last record is compared first; only another key is
 * looked up among the columns (and then remembered for the next record).
 */
static int
column_of_key(StmParser *p, int pos, const char *key, int keylen)
{
	StmKeySlot *slot;
	int			col;

	if (pos >= STM_KEY_SLOTS)
		return column_of_token(p, key, keylen, 0);
	slot = &p->keys[pos];
	if (slot->len == keylen && memcmp(slot->key, key, keylen) == 0)
		return slot->column;
	col = column_of_token(p, key, keylen, 0);
	slot->len = -1;
	if (keylen < (int) sizeof(slot->key))
	{
		memcpy(slot->key, key, keylen);
		slot->len = keylen;
		slot->column = col;
	}
	return col;
}

static void
json_nested_start(void *state)
{
	JsonRecordState *s = state;

	if (s->depth == 1 && s->column >= 0)
		s->raw_start = s->lex->token_start;
	s->depth++;
}

static void
json_nested_end(void *state)
{
	JsonRecordState *s = state;

	s->depth--;
	if (s->depth == 1 && s->column >= 0 && s->raw_start)
	{
		char	   *end = s->lex->prev_token_terminator;

		s->p->fields[s->column] = pnstrdup(s->raw_start, end - s->raw_start);
		s->raw_start = NULL;
	}
}

static void
json_field_start(void *state, char *fname, bool isnull)
{
	JsonRecordState *s = state;

	if (s->depth == 1)
	{
		s->column = column_of_token(s->p, fname, strlen(fname), 0);
		/* a repeated key: the last one wins, as in jsonb */
		if (s->column >= 0)
			s->p->fields[s->column] = NULL;
	}
}

static void
json_scalar(void *state, char *token, JsonTokenType tokentype)
{
	JsonRecordState *s = state;

	if (s->depth == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("JSON record is not an object")));
	if (s->depth != 1 || s->column < 0)
		return;
	if (tokentype == JSON_TOKEN_NULL)
		s->p->fields[s->column] = NULL;
	else if (tokentype == JSON_TOKEN_STRING && s->p->targets[s->column].wants_json)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		escape_json(&buf, token);
		s->p->fields[s->column] = buf.data;
	}
	else
		s->p->fields[s->column] = token;
}

/*
 * The common record, fast: a flat object whose keys and strings hold no
 * escapes.  PostgreSQL's lexer finds the tokens, without de-escaping them,
 * and the values are taken from the input as they are: p->fields point into
 * data, terminated in place once the whole record has been lexed (a NUL on
 * a value's closing quote, or on the character after it).  Anything else (a
 * nested value, an escape, a syntax error) returns false with data
 * unchanged, and the record goes through pg_parse_json, which handles it or
 * reports the error.
 */
static bool
parse_json_flat(StmParser *p, char *data, int len)
{
	JsonLexContext lex;
	int			pos = 0;

	/* as makeJsonLexContextCstringLen does it, without an allocation */
	memset(&lex, 0, sizeof(lex));
	lex.input = lex.token_terminator = lex.line_start = data;
	lex.line_number = 1;
	lex.input_length = len;
	lex.input_encoding = p->encoding;

	if (json_lex(&lex) != JSON_SUCCESS || lex.token_type != JSON_TOKEN_OBJECT_START ||
		json_lex(&lex) != JSON_SUCCESS)
		return false;
	while (lex.token_type != JSON_TOKEN_OBJECT_END)
	{
		char	   *key = lex.token_start + 1;
		int			keylen = lex.token_terminator - lex.token_start - 2;
		char	   *value;
		int			n;
		int			col;

		if (lex.token_type != JSON_TOKEN_STRING || memchr(key, '\\', keylen) != NULL ||
			json_lex(&lex) != JSON_SUCCESS || lex.token_type != JSON_TOKEN_COLON ||
			json_lex(&lex) != JSON_SUCCESS)
			return false;
		value = lex.token_start;
		n = lex.token_terminator - value;
		col = column_of_key(p, pos++, key, keylen);
		switch (lex.token_type)
		{
			case JSON_TOKEN_STRING:
				if (memchr(value, '\\', n) != NULL)
					return false;
				/* a json or jsonb column keeps the quotes: the value as JSON text */
				if (col >= 0 && p->targets[col].wants_json)
				{
					p->fields[col] = value;
					p->field_lens[col] = n;
				}
				else if (col >= 0)
				{
					p->fields[col] = value + 1;
					p->field_lens[col] = n - 2;
				}
				break;
			case JSON_TOKEN_NUMBER:
			case JSON_TOKEN_TRUE:
			case JSON_TOKEN_FALSE:
				if (col >= 0)
				{
					p->fields[col] = value;
					p->field_lens[col] = n;
				}
				break;
			case JSON_TOKEN_NULL:
				if (col >= 0)
					p->fields[col] = NULL;
				break;
			default:
				return false;	/* nested, or not a value */
		}
		if (json_lex(&lex) != JSON_SUCCESS)
			return false;
		if (lex.token_type == JSON_TOKEN_COMMA)
		{
			if (json_lex(&lex) != JSON_SUCCESS || lex.token_type == JSON_TOKEN_OBJECT_END)
				return false;
		}
		else if (lex.token_type != JSON_TOKEN_OBJECT_END)
			return false;
	}
	if (json_lex(&lex) != JSON_SUCCESS || lex.token_type != JSON_TOKEN_END)
		return false;
	for (int i = 0; i < p->nrow; i++)
		if (p->fields[i] != NULL)
			p->fields[i][p->field_lens[i]] = '\0';
	return true;
}

static void
parse_json_columns(StmParser *p, char *data, int len)
{
	JsonRecordState state = {p, NULL, 0, -1, NULL};
	int			i = 0;

	/* the top level must be an object */
	while (i < len && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r'))
		i++;
	if (i == len || data[i] != '{')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("JSON record is not an object")));

	state.lex = makeJsonLexContextCstringLen(data, len, GetDatabaseEncoding(), true);
	stm_json_walk(state.lex, &state, json_nested_start, json_nested_end,
				  json_field_start, json_scalar);
}

/*
 * PostgreSQL's JSON parser over a record, with one pair of callbacks for
 * objects and arrays alike (a record's walk tracks only their depth); a
 * record that is not JSON is the record's error.
 */
void
stm_json_walk(JsonLexContext *lex, void *state, json_struct_action container_start,
			  json_struct_action container_end, json_ofield_action field_start,
			  json_scalar_action scalar)
{
	JsonSemAction sem = {0};
	JsonParseErrorType rc;

	sem.semstate = state;
	sem.object_start = container_start;
	sem.object_end = container_end;
	sem.array_start = container_start;
	sem.array_end = container_end;
	sem.object_field_start = field_start;
	sem.scalar = scalar;
	rc = pg_parse_json(lex, &sem);
	if (rc != JSON_SUCCESS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("malformed JSON record"),
				 errdetail("%s", json_errdetail(rc, lex))));
}

/* ---- CSV ----------------------------------------------------------------- */

static void
parse_csv_fields(StmParser *p, const char *data, int len)
{
	int			col = 0;
	int			i = 0;
	StringInfoData field;

	/* a record produced as a line may keep its line end */
	if (len > 0 && data[len - 1] == '\n')
		len--;
	if (len > 0 && data[len - 1] == '\r')
		len--;

	initStringInfo(&field);
	for (;;)
	{
		bool		quoted = false;

		resetStringInfo(&field);
		if (i < len && data[i] == '"')
		{
			quoted = true;
			i++;
			for (;;)
			{
				if (i >= len)
					ereport(ERROR,
							(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
							 errmsg("unterminated CSV quoted field in column %d", col + 1)));
				if (data[i] == '"')
				{
					if (i + 1 < len && data[i + 1] == '"')
					{
						appendStringInfoChar(&field, '"');
						i += 2;
						continue;
					}
					i++;
					break;
				}
				appendStringInfoChar(&field, data[i++]);
			}
			if (i < len && data[i] != p->delimiter)
				ereport(ERROR,
						(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
						 errmsg("unexpected character after quoted CSV field in column %d", col + 1)));
		}
		else
		{
			while (i < len && data[i] != p->delimiter)
			{
				if (data[i] == '"')
					ereport(ERROR,
							(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
							 errmsg("unexpected quote inside unquoted CSV field in column %d", col + 1)));
				appendStringInfoChar(&field, data[i++]);
			}
		}

		if (col < p->nrow)
			p->fields[col] = (quoted || field.len > 0) ? pstrdup(field.data) : NULL;
		col++;
		if (i >= len)
			break;
		i++;					/* skip the delimiter */
	}
	if (col != p->nrow)
		ereport(ERROR,
				(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
				 errmsg("CSV record has %d fields, expected %d", col, p->nrow)));
}

/* ---- one record ---------------------------------------------------------- */

static void
check_record_size(int len)
{
	if (len > stm_guc_max_record_size)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("record of %d bytes is larger than streaming.max_record_size (%d bytes)",
						len, stm_guc_max_record_size)));
}

/* The record's text is valid in the database encoding and has no zero byte. */
void
stm_parse_check_record_text(const char *data, int len)
{
	/* rejects invalid byte sequences for the database encoding */
	(void) pg_verify_mbstr(GetDatabaseEncoding(), data, len, false);
	if (memchr(data, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("record contains a zero byte")));
}

/*
 * One column's text to its value.  The built-in types of StmInputKind are
 * converted by what their input functions call (int8in is pg_strtoint64,
 * textin cstring_to_text, ...): the same values and errors, without a
 * function call through fmgr.  Timestamps in the RFC 3339 form rfc3339.c
 * takes are converted there (the same values as the input function's,
 * test_timestamp_fast_path), any other text by the input function.  len is
 * f's length, or -1 (strlen).
 */
static inline Datum
convert_text(StmTextTarget *t, char *f, int len)
{
	Timestamp	ts;

	switch (t->kind)
	{
		case STM_INPUT_INT2:
			return Int16GetDatum(pg_strtoint16(f));
		case STM_INPUT_INT4:
			return Int32GetDatum(pg_strtoint32(f));
		case STM_INPUT_INT8:
			return Int64GetDatum(pg_strtoint64(f));
		case STM_INPUT_FLOAT8:
			return Float8GetDatum(float8in_internal(f, NULL, "double precision", f));
		case STM_INPUT_TEXT:
			return PointerGetDatum(cstring_to_text_with_len(f, len >= 0 ? len : strlen(f)));
		case STM_INPUT_TIMESTAMPTZ:
			if (stm_rfc3339_timestamptz(f, t->typmod, &ts))
				return TimestampTzGetDatum(ts);
			break;
		case STM_INPUT_TIMESTAMP:
			if (stm_rfc3339_timestamp(f, t->typmod, &ts))
				return TimestampGetDatum(ts);
			break;
		case STM_INPUT_FUNCTION:
			break;
	}
	return InputFunctionCall(&t->infunc, f, t->ioparam, t->typmod);
}

/* A text (NUL-terminated, of len bytes or -1) as a value of t's type. */
Datum
stm_text_target_convert(StmTextTarget *t, char *f, int len)
{
	return convert_text(t, f, len);
}

/* p->fields (text or NULL, one per column of the row) to values and nulls. */
static void
convert_fields(StmParser *p, Datum *values, bool *nulls)
{
	for (int i = 0; i < p->nrow; i++)
	{
		char	   *f = p->fields[i];

		nulls[i] = (f == NULL);
		if (f == NULL && p->targets[i].kind != STM_INPUT_FUNCTION)
			values[i] = (Datum) 0;
		else
			values[i] = convert_text(&p->targets[i], f, p->field_lens[i]);
	}
}

/*
 * A change event's cdc_op and cdc_ts (ts_ms: milliseconds since 1970, as
 * Debezium gives them), from what the envelope's parser found.
 */
void
stm_parse_fill_cdc(StmParser *p, Datum *values, bool *nulls)
{
	if (p->cdc_op_col < 0)
		return;
	values[p->cdc_op_col] = PointerGetDatum(cstring_to_text_with_len(&p->cdc_op, 1));
	nulls[p->cdc_op_col] = false;
	nulls[p->cdc_ts_col] = !p->has_cdc_ts;
	values[p->cdc_ts_col] = (Datum) 0;
	if (p->has_cdc_ts)
	{
		TimestampTz ts;

		if (pg_mul_s64_overflow(p->cdc_ts_ms, 1000, &ts) ||
			pg_add_s64_overflow(ts, STM_UNIX_EPOCH, &ts) || !IS_VALID_TIMESTAMP(ts))
			ereport(ERROR,
					(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
					 errmsg("ts_ms of the change event is out of range: " INT64_FORMAT,
							p->cdc_ts_ms)));
		values[p->cdc_ts_col] = TimestampTzGetDatum(ts);
	}
}

/* No field yet: every column NULL, of unknown length. */
static void
clear_fields(StmParser *p)
{
	for (int i = 0; i < p->nrow; i++)
	{
		p->fields[i] = NULL;
		p->field_lens[i] = -1;
	}
}

/*
 * Fill values/nulls[0 .. ncols-1] from one record.  data need not be
 * NUL-terminated.  Raises an error for a bad record.
 */
void
stm_parse_record(StmParser *p, const char *data, int len,
				 Datum *values, bool *nulls)
{
	char	   *buf;
	MemoryContext oldcxt;

	/* every column of such a source is metadata (the rate source) */
	if (p->format == STM_FORMAT_NONE)
		return;
	/* a tombstone (no value at all) */
	if (data == NULL)
	{
		if (p->format == STM_FORMAT_TEXT || p->format == STM_FORMAT_BYTES)
		{
			values[0] = (Datum) 0;
			nulls[0] = true;
			return;
		}
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("record has no value")));
	}
	check_record_size(len);

	if (p->format == STM_FORMAT_AVRO)
	{
		stm_avro_parse(p->avro, data, len, values, nulls);
		stm_parse_fill_cdc(p, values, nulls);
		return;
	}

	if (p->format == STM_FORMAT_BYTES)
	{
		bytea	   *b = palloc(len + VARHDRSZ);

		SET_VARSIZE(b, len + VARHDRSZ);
		memcpy(VARDATA(b), data, len);
		values[0] = PointerGetDatum(b);
		nulls[0] = false;
		return;
	}

	if (len == 0 && p->format != STM_FORMAT_TEXT)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("empty record")));

	stm_parse_check_record_text(data, len);

	if (p->format == STM_FORMAT_TEXT)
	{
		values[0] = PointerGetDatum(cstring_to_text_with_len(data, len));
		nulls[0] = false;
		return;
	}

	/* the record as a C string, in the parser's own buffer */
	if (len + 1 > p->buf_size)
	{
		p->buf_size = Max(len + 1, p->buf_size * 2);
		p->buf = repalloc(p->buf, p->buf_size);
	}
	buf = p->buf;
	memcpy(buf, data, len);
	buf[len] = '\0';
	if (p->debezium)
	{
		/* the row is in the event's before or after: debezium.c finds it */
		clear_fields(p);
		MemoryContextReset(p->scratch);
		oldcxt = MemoryContextSwitchTo(p->scratch);
		stm_debezium_parse_json(p->debezium, buf, len);
		MemoryContextSwitchTo(oldcxt);
		convert_fields(p, values, nulls);
		stm_parse_fill_cdc(p, values, nulls);
		return;
	}
	if (p->format == STM_FORMAT_JSON && !p->has_columns)
	{
		values[0] = DirectFunctionCall1(jsonb_in, CStringGetDatum(buf));
		nulls[0] = false;
		return;
	}
	clear_fields(p);
	if (p->format == STM_FORMAT_CSV || !parse_json_flat(p, buf, len))
	{
		/* splitting and lexing garbage goes to the scratch context */
		clear_fields(p);
		MemoryContextReset(p->scratch);
		oldcxt = MemoryContextSwitchTo(p->scratch);
		if (p->format == STM_FORMAT_CSV)
			parse_csv_fields(p, buf, len);
		else
			parse_json_columns(p, buf, len);
		MemoryContextSwitchTo(oldcxt);
	}
	/* values go to the caller's context */
	convert_fields(p, values, nulls);
}

/*
 * kafka_key_avro (key_format avro): the record's key, an Avro value in the
 * wire format, as jsonb; NULL for a record without a key.
 */
void
stm_parse_key(StmParser *p, const char *key, int len, Datum *values, bool *nulls)
{
	if (p->key_avro_col < 0)
		return;
	nulls[p->key_avro_col] = (key == NULL);
	values[p->key_avro_col] = (Datum) 0;
	if (key != NULL)
	{
		check_record_size(len);
		values[p->key_avro_col] = stm_avro_parse_jsonb(p->avro, key, len);
	}
}

/*
 * Fill values/nulls[0 .. ncols-1] from the fields of a CSV record that its
 * source split (NULL fields are SQL NULLs), data being the raw record:
 * the same checks and conversions as stm_parse_record.
 */
void
stm_parse_fields(StmParser *p, char **fields, int nfields, const char *data, int len,
				 Datum *values, bool *nulls)
{
	check_record_size(len);
	stm_parse_check_record_text(data, len);
	if (nfields != p->nrow)
		ereport(ERROR,
				(errcode(ERRCODE_BAD_COPY_FILE_FORMAT),
				 errmsg("CSV record has %d fields, expected %d", nfields, p->nrow)));
	clear_fields(p);
	memcpy(p->fields, fields, sizeof(char *) * p->nrow);
	convert_fields(p, values, nulls);
}
