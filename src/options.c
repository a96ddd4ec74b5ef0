/*
 * options.c: a source's options, as stored: a jsonb object of its create
 * function's arguments by name (NULL arguments are left out).  The source
 * kinds read them through these accessors at create time, to check them,
 * and when a source is opened; values are JSON strings, numbers, booleans,
 * arrays and objects, as jsonb_build_object made them from the arguments.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "options.h"

/* The value of key, or NULL when it is not there. */
static JsonbValue *
lookup(Jsonb *options, const char *key)
{
	JsonbValue	k;

	if (options == NULL || !JB_ROOT_IS_OBJECT(options))
		return NULL;
	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(&options->root, JB_FOBJECT, &k);
}

/* A scalar as text (strings unquoted); NULL for a JSON null. */
static char *
scalar_text(JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			return NULL;
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out,
													   NumericGetDatum(v->val.numeric)));
		default:
			return JsonbToCString(NULL, v->val.binary.data, v->val.binary.len);
	}
}

bool
stm_option_given(Jsonb *options, const char *key)
{
	JsonbValue *v = lookup(options, key);

	return v != NULL && v->type != jbvNull;
}

/* The option as text, or NULL when not given. */
char *
stm_option_text(Jsonb *options, const char *key)
{
	JsonbValue *v = lookup(options, key);

	return v ? scalar_text(v) : NULL;
}

bool
stm_option_bool(Jsonb *options, const char *key, bool dflt)
{
	JsonbValue *v = lookup(options, key);

	if (v == NULL || v->type == jbvNull)
		return dflt;
	if (v->type == jbvBool)
		return v->val.boolean;
	return DatumGetBool(DirectFunctionCall1(boolin, CStringGetDatum(scalar_text(v))));
}

int64
stm_option_int64(Jsonb *options, const char *key, int64 dflt)
{
	char	   *t = stm_option_text(options, key);

	return t ? pg_strtoint64(t) : dflt;
}

/* An interval option (stored as its text) in milliseconds (a month is 30 days). */
int64
stm_option_interval_ms(Jsonb *options, const char *key, int64 dflt)
{
	char	   *t = stm_option_text(options, key);
	Interval   *iv;

	if (t == NULL)
		return dflt;
	iv = DatumGetIntervalP(DirectFunctionCall3(interval_in, CStringGetDatum(t),
											   ObjectIdGetDatum(InvalidOid),
											   Int32GetDatum(-1)));
	return iv->time / 1000 + (int64) iv->day * 86400000 + (int64) iv->month * 30 * 86400000;
}

/* A nested value (an array, an object) as a Jsonb of its own, or NULL. */
Jsonb *
stm_option_jsonb(Jsonb *options, const char *key)
{
	JsonbValue *v = lookup(options, key);

	if (v == NULL || v->type == jbvNull)
		return NULL;
	return JsonbValueToJsonb(v);
}

/* The members of an object option as StmOptionPair, in jsonb's key order. */
List *
stm_option_pairs(Jsonb *options, const char *key)
{
	Jsonb	   *obj = stm_option_jsonb(options, key);
	List	   *result = NIL;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *k = NULL;

	if (obj == NULL || !JB_ROOT_IS_OBJECT(obj))
		return NIL;
	it = JsonbIteratorInit(&obj->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			k = pnstrdup(v.val.string.val, v.val.string.len);
		else if (tok == WJB_VALUE)
		{
			StmOptionPair *p = palloc(sizeof(StmOptionPair));

			p->key = k;
			p->value = scalar_text(&v);
			result = lappend(result, p);
		}
	}
	return result;
}

/* The elements of an array option, each as text. */
List *
stm_option_elements(Jsonb *options, const char *key)
{
	Jsonb	   *arr = stm_option_jsonb(options, key);
	List	   *result = NIL;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;

	if (arr == NULL || !JB_ROOT_IS_ARRAY(arr) || JB_ROOT_IS_SCALAR(arr))
		return NIL;
	it = JsonbIteratorInit(&arr->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		if (tok == WJB_ELEM)
			result = lappend(result, scalar_text(&v));
	return result;
}

/* The options with key set to a string (or removed, with NULL). */
Jsonb *
stm_option_set_text(Jsonb *options, const char *key, const char *value)
{
	StringInfoData buf;
	Datum		delta;

	options = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, JsonbPGetDatum(options),
												 CStringGetTextDatum(key)));
	if (value == NULL)
		return options;
	initStringInfo(&buf);
	appendStringInfoChar(&buf, '{');
	escape_json(&buf, key);
	appendStringInfoString(&buf, ": ");
	escape_json(&buf, value);
	appendStringInfoChar(&buf, '}');
	delta = DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
	return DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(options), delta));
}
