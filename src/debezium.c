/*
 * debezium.c: Debezium's change events (SPEC 2.1.2).
 *
 * An event is an envelope: before (the row before the change), after (the
 * row after it), op ('c' create, 'u' update, 'd' delete, 'r' read in a
 * snapshot) and ts_ms (when the connector saw it).  A source with
 * envelope => 'debezium' reads its rows from after (c, u, r) or before
 * (d), and gives op and ts_ms as cdc_op and cdc_ts (parse.c fills them).
 * Avro events are taken apart in avro.c; JSON ones here.
 *
 * JSON comes with or without Kafka Connect's schema/payload wrapper
 * ({"schema": ..., "payload": {envelope}}), decided per record; PostgreSQL's
 * JSON parser walks the record once with semantic actions that keep the
 * values of the row's fields (both sides: op may come last) as texts, which
 * parse.c converts as it converts any JSON record.  With the wrapper, the
 * schema says how Connect encoded values that JSON cannot hold: decimals
 * as base64 of their unscaled bytes with the schema's scale, dates and
 * times as numbers since 1970 (Debezium's time types), bytes as base64;
 * those are turned into PostgreSQL's texts of them.  The schema's text is
 * kept and what it says worked out again only when it changes (a table's
 * schema changes rarely).
 *
 * The common event (no wrapper; before and after flat objects or null;
 * other members scalars or flat objects; no escapes anywhere) is taken
 * apart by the lexer alone, as parse.c's flat JSON records are: the texts
 * point into the record, terminated in place, with no allocation.
 * Anything else falls back to the walk above, which also reports the
 * errors.  In test builds every event taken the fast way is walked too and
 * the two compared (check_fast_event).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/base64.h"
#include "common/jsonapi.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "avro.h"
#include "debezium.h"
#include "options.h"

/* How Connect encoded a field's value in JSON (the wrapper's schema). */
typedef enum ConnectKind
{
	CONNECT_PLAIN,
	CONNECT_DECIMAL,			/* base64 of the unscaled bytes, parameters.scale */
	CONNECT_VARIABLE_DECIMAL,	/* {"scale": s, "value": base64} */
	CONNECT_BYTES,				/* base64 */
	CONNECT_TEMPORAL			/* a number: logical says what it counts */
} ConnectKind;

typedef struct ConnectField
{
	ConnectKind kind;
	int			scale;
	StmAvroLogical logical;
} ConnectField;

struct StmDebeziumJson
{
	StmParser  *p;
	MemoryContext cxt;			/* the parser's: what outlives a record */
	char	  **sides[2];		/* the texts of after's fields, of before's */
	int		   *lens[2];		/* the fast path's: their lengths */
	char	   *schema;			/* the wrapper's schema as last seen (NULL: none yet) */
	int			schema_len;
	ConnectField *fields;		/* what it says of each row column */
};

/* The walk of one event. */
typedef struct EventWalk
{
	StmDebeziumJson *dj;
	JsonLexContext *lex;
	int			depth;			/* containers open */
	const char *path[3];		/* the keys at depths 1, 2 and 3 */
	int			side;			/* in a row object: 0 after, 1 before; -1 not */
	int			row_depth;		/* the depth of the row object's fields */
	int			column;			/* the row field's column, or -1 */
	int			capture;		/* a nested value being kept: 0 none, 1 a field's, 2 the row, 3 the schema */
	int			capture_depth;
	char	   *capture_start;
	bool		wrapped;		/* a "payload" at the top */
	bool		seen[2];		/* after, before: an object was there */
	char	   *op;
	char	   *ts_ms;
	char	   *schema;			/* the wrapper's schema text (in the record) */
	int			schema_len;
} EventWalk;

char
stm_debezium_op(const char *op, int len)
{
	if (len == 1 && strchr("cudr", op[0]) != NULL)
		return op[0];
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
			 errmsg("unsupported Debezium op \"%.*s\"", len, op),
			 errdetail("Change events with op c, u, d and r are rows; a truncate (t) or message (m) event is not.")));
	return 0;					/* keep compiler quiet */
}

/* Debezium's and Connect's names of int and long encodings of dates and times. */
StmAvroLogical
stm_debezium_logical(const char *name, bool is_long)
{
	static const struct
	{
		const char *name;
		bool		is_long;
		StmAvroLogical logical;
	}			names[] = {
		{"io.debezium.time.Date", false, STM_AVRO_DATE},
		{"org.apache.kafka.connect.data.Date", false, STM_AVRO_DATE},
		{"io.debezium.time.Time", false, STM_AVRO_TIME_MILLIS},
		{"org.apache.kafka.connect.data.Time", false, STM_AVRO_TIME_MILLIS},
		{"io.debezium.time.MicroTime", true, STM_AVRO_TIME_MICROS},
		{"io.debezium.time.NanoTime", true, STM_AVRO_TIME_NANOS},
		{"io.debezium.time.Timestamp", true, STM_AVRO_LOCAL_TIMESTAMP_MILLIS},
		{"org.apache.kafka.connect.data.Timestamp", true, STM_AVRO_TIMESTAMP_MILLIS},
		{"io.debezium.time.MicroTimestamp", true, STM_AVRO_LOCAL_TIMESTAMP_MICROS},
		{"io.debezium.time.NanoTimestamp", true, STM_AVRO_LOCAL_TIMESTAMP_NANOS}
	};

	for (int i = 0; i < lengthof(names); i++)
		if (strcmp(names[i].name, name) == 0 && names[i].is_long == is_long)
			return names[i].logical;
	return STM_AVRO_PLAIN;
}

StmDebeziumJson *
stm_debezium_json_new(StmParser *p)
{
	StmDebeziumJson *dj = palloc0(sizeof(StmDebeziumJson));

	dj->p = p;
	dj->cxt = CurrentMemoryContext;
	dj->sides[0] = palloc0(sizeof(char *) * Max(p->nrow, 1));
	dj->sides[1] = palloc0(sizeof(char *) * Max(p->nrow, 1));
	dj->lens[0] = palloc0(sizeof(int) * Max(p->nrow, 1));
	dj->lens[1] = palloc0(sizeof(int) * Max(p->nrow, 1));
	dj->fields = palloc0(sizeof(ConnectField) * Max(p->nrow, 1));
	return dj;
}

/* ---- the walk ---------------------------------------------------------------- */

static bool
key_is(const char *key, const char *name)
{
	return key != NULL && strcmp(key, name) == 0;
}

/* Is the value about to open (or be given) at the current depth an envelope's member named name? */
static bool
envelope_member(EventWalk *w, const char *name)
{
	return (w->depth == 1 && key_is(w->path[0], name)) ||
		(w->depth == 2 && key_is(w->path[0], "payload") && key_is(w->path[1], name));
}

static int
row_column(StmParser *p, const char *key)
{
	for (int i = 0; i < p->nrow; i++)
		if (strcmp(p->names[i], key) == 0)
			return i;
	return -1;
}

static void
walk_container_start(void *state)
{
	EventWalk  *w = state;
	StmParser  *p = w->dj->p;

	if (w->capture == 0)
	{
		if (w->depth == 1 && key_is(w->path[0], "schema"))
			w->capture = 3;
		else if (w->side >= 0 && w->depth == w->row_depth && w->column >= 0)
			w->capture = 1;
		else if (envelope_member(w, "after") || envelope_member(w, "before"))
		{
			w->side = envelope_member(w, "after") ? 0 : 1;
			w->seen[w->side] = true;
			w->row_depth = w->depth + 1;
			/* no declared columns: the row object is the one jsonb value */
			if (!p->has_columns)
				w->capture = 2;
		}
		if (w->capture != 0)
		{
			w->capture_depth = w->depth;
			w->capture_start = w->lex->token_start;
		}
	}
	w->depth++;
}

static void
walk_container_end(void *state)
{
	EventWalk  *w = state;
	StmDebeziumJson *dj = w->dj;

	w->depth--;
	if (w->capture != 0 && w->depth == w->capture_depth)
	{
		char	   *end = w->lex->prev_token_terminator;
		int			len = end - w->capture_start;

		if (w->capture == 3)
		{
			w->schema = w->capture_start;
			w->schema_len = len;
		}
		else if (w->capture == 2)
			dj->sides[w->side][0] = pnstrdup(w->capture_start, len);
		else
			dj->sides[w->side][w->column] = pnstrdup(w->capture_start, len);
		w->capture = 0;
	}
	if (w->side >= 0 && w->depth == w->row_depth - 1)
		w->side = -1;
}

static void
walk_field_start(void *state, char *fname, bool isnull)
{
	EventWalk  *w = state;

	/* the keys of a value being kept are its own (not the row's columns) */
	if (w->capture != 0)
		return;
	if (w->depth >= 1 && w->depth <= 3)
		w->path[w->depth - 1] = fname;
	if (w->depth == 1 && strcmp(fname, "payload") == 0)
		w->wrapped = true;
	w->column = -1;
	if (w->side >= 0 && w->depth == w->row_depth && w->capture == 0 && w->dj->p->has_columns)
	{
		w->column = row_column(w->dj->p, fname);
		/* a repeated key: the last one wins, as in jsonb */
		if (w->column >= 0)
			w->dj->sides[w->side][w->column] = NULL;
	}
}

static void
walk_scalar(void *state, char *token, JsonTokenType type)
{
	EventWalk  *w = state;
	StmParser  *p = w->dj->p;

	if (w->depth == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("JSON record is not an object")));
	if (w->capture != 0)
		return;
	if (w->side >= 0 && w->depth == w->row_depth)
	{
		if (w->column < 0 || type == JSON_TOKEN_NULL)
			return;
		if (type == JSON_TOKEN_STRING && p->targets[w->column].wants_json)
		{
			StringInfoData buf;

			initStringInfo(&buf);
			escape_json(&buf, token);
			token = buf.data;
		}
		w->dj->sides[w->side][w->column] = token;
		return;
	}
	if (envelope_member(w, "op") && type == JSON_TOKEN_STRING)
		w->op = token;
	else if (envelope_member(w, "ts_ms") && type == JSON_TOKEN_NUMBER)
		w->ts_ms = token;
	else if (envelope_member(w, "ts_ms") && type != JSON_TOKEN_NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("ts_ms of the Debezium change event is not a number: %s", token)));
}

/* ---- the fast path ------------------------------------------------------------ */

/* Is the key token's text (keylen bytes, no quotes) name? */
static inline bool
key_eq(const char *key, int keylen, const char *name)
{
	return strlen(name) == keylen && memcmp(key, name, keylen) == 0;
}

/*
 * The declared column named key (keylen bytes, no escapes), or -1; the
 * column after *guess first (rows of a table share their key order).
 */
static int
row_column_len(StmParser *p, const char *key, int keylen, int *guess)
{
	int			g = *guess + 1;

	if (g >= 0 && g < p->nrow && key_eq(key, keylen, p->names[g]))
		return *guess = g;
	for (int i = 0; i < p->nrow; i++)
		if (key_eq(key, keylen, p->names[i]))
			return *guess = i;
	return -1;
}

static inline bool
lex_next(JsonLexContext *lex)
{
	return json_lex(lex) == JSON_SUCCESS;
}

/*
 * A flat object, the lexer at its '{': scalars only, no escapes; with side
 * >= 0 the values of the declared columns kept in that side (the last of a
 * repeated key, as the walk keeps).  Leaves the lexer at the '}'; false
 * for anything else.
 */
static bool
flat_object(StmDebeziumJson *dj, JsonLexContext *lex, int side)
{
	StmParser  *p = dj->p;
	int			guess = -1;

	if (!lex_next(lex))
		return false;
	while (lex->token_type != JSON_TOKEN_OBJECT_END)
	{
		char	   *key = lex->token_start + 1;
		int			keylen = lex->token_terminator - lex->token_start - 2;
		char	   *value;
		int			n;
		int			col;

		if (lex->token_type != JSON_TOKEN_STRING || memchr(key, '\\', keylen) != NULL ||
			!lex_next(lex) || lex->token_type != JSON_TOKEN_COLON || !lex_next(lex))
			return false;
		value = lex->token_start;
		n = lex->token_terminator - value;
		col = side >= 0 ? row_column_len(p, key, keylen, &guess) : -1;
		switch (lex->token_type)
		{
			case JSON_TOKEN_STRING:
				if (memchr(value, '\\', n) != NULL)
					return false;
				/* a json or jsonb column keeps the quotes (escape_json of the text) */
				if (col >= 0 && !p->targets[col].wants_json)
				{
					value++;
					n -= 2;
				}
				break;
			case JSON_TOKEN_NUMBER:
			case JSON_TOKEN_TRUE:
			case JSON_TOKEN_FALSE:
				break;
			case JSON_TOKEN_NULL:
				value = NULL;
				break;
			default:
				return false;	/* nested, or not a value */
		}
		if (col >= 0)
		{
			dj->sides[side][col] = value;
			dj->lens[side][col] = n;
		}
		if (!lex_next(lex))
			return false;
		if (lex->token_type == JSON_TOKEN_COMMA)
		{
			if (!lex_next(lex) || lex->token_type == JSON_TOKEN_OBJECT_END)
				return false;
		}
		else if (lex->token_type != JSON_TOKEN_OBJECT_END)
			return false;
	}
	return true;
}

/*
 * The common event by the lexer alone (see the top of the file): what the
 * walk would find, into w (op, ts_ms, seen) and the sides; false, with buf
 * unchanged, for anything the walk must see.
 */
static bool
fast_event(StmDebeziumJson *dj, char *buf, int len, EventWalk *w)
{
	StmParser  *p = dj->p;
	JsonLexContext lex;
	int			op_len = 0;
	int			ts_len = 0;

	if (!p->has_columns)
		return false;
	/* as makeJsonLexContextCstringLen does it, without an allocation or de-escaping */
	memset(&lex, 0, sizeof(lex));
	lex.input = lex.token_terminator = lex.line_start = buf;
	lex.line_number = 1;
	lex.input_length = len;
	lex.input_encoding = p->encoding;

	if (!lex_next(&lex) || lex.token_type != JSON_TOKEN_OBJECT_START || !lex_next(&lex))
		return false;
	while (lex.token_type != JSON_TOKEN_OBJECT_END)
	{
		char	   *key = lex.token_start + 1;
		int			keylen = lex.token_terminator - lex.token_start - 2;
		int			side = -1;
		char	   *value;
		int			n;

		if (lex.token_type != JSON_TOKEN_STRING || memchr(key, '\\', keylen) != NULL ||
			!lex_next(&lex) || lex.token_type != JSON_TOKEN_COLON || !lex_next(&lex))
			return false;
		/* Connect's wrapper: the walk */
		if (key_eq(key, keylen, "schema") || key_eq(key, keylen, "payload"))
			return false;
		if (key_eq(key, keylen, "after"))
			side = 0;
		else if (key_eq(key, keylen, "before"))
			side = 1;
		value = lex.token_start;
		n = lex.token_terminator - value;
		switch (lex.token_type)
		{
			case JSON_TOKEN_OBJECT_START:
				if (side >= 0)
					w->seen[side] = true;
				if (!flat_object(dj, &lex, side))
					return false;
				break;
			case JSON_TOKEN_STRING:
			case JSON_TOKEN_NUMBER:
			case JSON_TOKEN_TRUE:
			case JSON_TOKEN_FALSE:
			case JSON_TOKEN_NULL:
				if (lex.token_type == JSON_TOKEN_STRING && memchr(value, '\\', n) != NULL)
					return false;
				/* a row that is neither an object nor null: the walk's business */
				if (side >= 0 && lex.token_type != JSON_TOKEN_NULL)
					return false;
				if (key_eq(key, keylen, "op") && lex.token_type == JSON_TOKEN_STRING)
				{
					w->op = value + 1;
					op_len = n - 2;
				}
				else if (key_eq(key, keylen, "ts_ms") && lex.token_type == JSON_TOKEN_NUMBER)
				{
					w->ts_ms = value;
					ts_len = n;
				}
				else if (key_eq(key, keylen, "ts_ms") && lex.token_type != JSON_TOKEN_NULL)
					return false;	/* the walk's error */
				break;
			default:
				return false;	/* an array, or not a value */
		}
		if (!lex_next(&lex))
			return false;
		if (lex.token_type == JSON_TOKEN_COMMA)
		{
			if (!lex_next(&lex) || lex.token_type == JSON_TOKEN_OBJECT_END)
				return false;
		}
		else if (lex.token_type != JSON_TOKEN_OBJECT_END)
			return false;
	}
	if (!lex_next(&lex) || lex.token_type != JSON_TOKEN_END)
		return false;
	/* the whole event lexed: terminate the texts kept, in place */
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < p->nrow; i++)
			if (dj->sides[s][i] != NULL)
				dj->sides[s][i][dj->lens[s][i]] = '\0';
	if (w->op)
		w->op[op_len] = '\0';
	if (w->ts_ms)
		w->ts_ms[ts_len] = '\0';
	return true;
}

/* The walk of one event: what it finds into w and the sides, or the record's error. */
static void
walk_event(StmDebeziumJson *dj, char *buf, int len, EventWalk *w)
{
	w->dj = dj;
	w->side = -1;
	w->column = -1;
	w->lex = makeJsonLexContextCstringLen(buf, len, GetDatabaseEncoding(), true);
	stm_json_walk(w->lex, w, walk_container_start, walk_container_end,
				  walk_field_start, walk_scalar);
}

#ifdef STM_FAULT_INJECTION
static bool
same_text(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

/*
 * Test builds: the walk of the event (copy: as it was before the fast path
 * terminated its texts) must find what the fast path found.
 */
static void
check_fast_event(StmDebeziumJson *dj, char *copy, int len, EventWalk *fast)
{
	StmParser  *p = dj->p;
	EventWalk	w = {0};
	char	  **sides[2];

	for (int s = 0; s < 2; s++)
	{
		sides[s] = palloc(sizeof(char *) * Max(p->nrow, 1));
		memcpy(sides[s], dj->sides[s], sizeof(char *) * Max(p->nrow, 1));
		memset(dj->sides[s], 0, sizeof(char *) * Max(p->nrow, 1));
	}
	walk_event(dj, copy, len, &w);
	if (w.wrapped || !same_text(w.op, fast->op) || !same_text(w.ts_ms, fast->ts_ms) ||
		w.seen[0] != fast->seen[0] || w.seen[1] != fast->seen[1])
		elog(ERROR, "the Debezium fast path differs from the walk in the envelope of %s", copy);
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < p->nrow; i++)
			if (!same_text(sides[s][i], dj->sides[s][i]))
				elog(ERROR, "the Debezium fast path differs from the walk in column %d of %s: %s and %s",
					 i, s ? "before" : "after", sides[s][i] ? sides[s][i] : "NULL",
					 dj->sides[s][i] ? dj->sides[s][i] : "NULL");
}
#endif

/* ---- the wrapper's schema ------------------------------------------------------ */

static JsonbValue *
member(JsonbValue *obj, const char *key)
{
	JsonbValue	k;

	if (obj == NULL || obj->type != jbvBinary || !JsonContainerIsObject(obj->val.binary.data))
		return NULL;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(obj->val.binary.data, JB_FOBJECT, &k);
}

static bool
string_is(JsonbValue *v, const char *s)
{
	return v && v->type == jbvString && v->val.string.len == strlen(s) &&
		memcmp(v->val.string.val, s, v->val.string.len) == 0;
}

/* The element of a "fields" array whose "field" is name, or NULL. */
static JsonbValue *
field_named(JsonbValue *obj, const char *name)
{
	JsonbValue *fields = member(obj, "fields");
	int			n;

	if (fields == NULL || fields->type != jbvBinary || !JsonContainerIsArray(fields->val.binary.data))
		return NULL;
	n = JsonContainerSize(fields->val.binary.data);
	for (int i = 0; i < n; i++)
	{
		JsonbValue *f = getIthJsonbValueFromContainer(fields->val.binary.data, i);

		if (string_is(member(f, "field"), name))
			return f;
	}
	return NULL;
}

/* What the wrapper's schema (text, of len) says of each row column's encoding. */
static void
read_schema(StmDebeziumJson *dj, const char *text, int len)
{
	StmParser  *p = dj->p;
	MemoryContext old = MemoryContextSwitchTo(dj->cxt);
	Jsonb	   *j = NULL;
	JsonbValue	root;
	JsonbValue *row;

	if (dj->schema)
		pfree(dj->schema);
	dj->schema = pnstrdup(text, len);
	dj->schema_len = len;
	memset(dj->fields, 0, sizeof(ConnectField) * Max(p->nrow, 1));
	MemoryContextSwitchTo(old);

	PG_TRY();
	{
		j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(pnstrdup(text, len))));
	}
	PG_CATCH();
	{
		FlushErrorState();
	}
	PG_END_TRY();
	if (j == NULL || JB_ROOT_IS_SCALAR(j))
		return;
	root.type = jbvBinary;
	root.val.binary.data = &j->root;
	root.val.binary.len = VARSIZE(j) - VARHDRSZ;
	row = field_named(&root, "after");
	if (row == NULL)
		row = field_named(&root, "before");
	for (int i = 0; row && i < p->nrow; i++)
	{
		JsonbValue *f = field_named(row, p->names[i]);
		JsonbValue *name = member(f, "name");
		JsonbValue *type = member(f, "type");
		char	   *n = name && name->type == jbvString ?
			pnstrdup(name->val.string.val, name->val.string.len) : NULL;
		ConnectField *cf = &dj->fields[i];

		if (f == NULL)
			continue;
		if (n && strcmp(n, "org.apache.kafka.connect.data.Decimal") == 0)
		{
			JsonbValue *scale = member(member(f, "parameters"), "scale");

			cf->kind = CONNECT_DECIMAL;
			if (scale && scale->type == jbvString)
				cf->scale = pg_strtoint32(pnstrdup(scale->val.string.val, scale->val.string.len));
			else if (scale && scale->type == jbvNumeric)
				cf->scale = DatumGetInt32(DirectFunctionCall1(numeric_int4,
															  NumericGetDatum(scale->val.numeric)));
		}
		else if (n && strcmp(n, "io.debezium.data.VariableScaleDecimal") == 0)
			cf->kind = CONNECT_VARIABLE_DECIMAL;
		else if (n && (string_is(type, "int32") || string_is(type, "int64")) &&
				 stm_debezium_logical(n, string_is(type, "int64")) != STM_AVRO_PLAIN)
		{
			cf->kind = CONNECT_TEMPORAL;
			cf->logical = stm_debezium_logical(n, string_is(type, "int64"));
		}
		else if (n == NULL && string_is(type, "bytes"))
			cf->kind = CONNECT_BYTES;
	}
}

/* base64 text into its bytes; *len their number */
static unsigned char *
from_base64(const char *text, int *len)
{
	int			srclen = strlen(text);
	unsigned char *buf = palloc(pg_b64_dec_len(srclen) + 1);

	*len = pg_b64_decode(text, srclen, (char *) buf, pg_b64_dec_len(srclen));
	if (*len < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("invalid base64 in a Debezium value: \"%s\"", text)));
	return buf;
}

/* A field's text as Connect encoded it, as PostgreSQL's text of the value. */
static char *
connect_text(ConnectField *cf, char *text)
{
	int			len;
	unsigned char *bytes;

	switch (cf->kind)
	{
		case CONNECT_DECIMAL:
			bytes = from_base64(text, &len);
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   stm_avro_decimal(bytes, len, cf->scale)));
		case CONNECT_VARIABLE_DECIMAL:
			{
				Jsonb	   *j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
				char	   *scale = stm_option_text(j, "scale");
				char	   *value = stm_option_text(j, "value");

				if (scale == NULL || value == NULL)
					ereport(ERROR,
							(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
							 errmsg("invalid Debezium variable-scale decimal: %s", text)));
				bytes = from_base64(value, &len);
				return DatumGetCString(DirectFunctionCall1(numeric_out,
														   stm_avro_decimal(bytes, len, pg_strtoint32(scale))));
			}
		case CONNECT_BYTES:
			{
				char	   *hex;

				bytes = from_base64(text, &len);
				hex = palloc(len * 2 + 3);
				hex[0] = '\\';
				hex[1] = 'x';
				hex[hex_encode((char *) bytes, len, hex + 2) + 2] = '\0';
				return hex;
			}
		case CONNECT_TEMPORAL:
			{
				Oid			type;
				Datum		d = stm_avro_logical_datum(cf->logical, pg_strtoint64(text), &type);
				char	   *buf = palloc(MAXDATELEN + 1);

				return JsonEncodeDateTime(buf, d, type, NULL);
			}
		default:
			return text;
	}
}

/*
 * One JSON event (buf, NUL-terminated, of len bytes) into the parser: the
 * row's fields as texts (p->fields) from after or before, and cdc_op,
 * cdc_ts.  In the parser's scratch context.
 */
void
stm_debezium_parse_json(StmDebeziumJson *dj, char *buf, int len)
{
	StmParser  *p = dj->p;
	EventWalk	w = {0};
	int			side;
#ifdef STM_FAULT_INJECTION
	char	   *copy = pnstrdup(buf, len);
#endif

	for (int s = 0; s < 2; s++)
		memset(dj->sides[s], 0, sizeof(char *) * Max(p->nrow, 1));
	if (fast_event(dj, buf, len, &w))
	{
#ifdef STM_FAULT_INJECTION
		check_fast_event(dj, copy, len, &w);
#endif
	}
	else
	{
		memset(&w, 0, sizeof(w));
		for (int s = 0; s < 2; s++)
			memset(dj->sides[s], 0, sizeof(char *) * Max(p->nrow, 1));
		walk_event(dj, buf, len, &w);
	}
	if (w.op == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("JSON record is not a Debezium change event: it has no op"),
				 errhint("A change event has before, after and op, at its top or in its payload.")));
	p->cdc_op = stm_debezium_op(w.op, strlen(w.op));
	p->has_cdc_ts = w.ts_ms != NULL;
	if (w.ts_ms)
		p->cdc_ts_ms = pg_strtoint64(w.ts_ms);
	side = p->cdc_op == 'd' ? 1 : 0;
	if (!w.seen[side])
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("Debezium change event with op \"%c\" has no %s", p->cdc_op,
						side ? "before" : "after")));
	memcpy(p->fields, dj->sides[side], sizeof(char *) * p->nrow);
	if (!w.wrapped || w.schema == NULL || !p->has_columns)
		return;
	if (dj->schema == NULL || dj->schema_len != w.schema_len ||
		memcmp(dj->schema, w.schema, w.schema_len) != 0)
		read_schema(dj, w.schema, w.schema_len);
	for (int i = 0; i < p->nrow; i++)
		if (p->fields[i] != NULL && dj->fields[i].kind != CONNECT_PLAIN)
			p->fields[i] = connect_text(&dj->fields[i], p->fields[i]);
}
