/*
 * avro.c: Avro in the Confluent wire format (SPEC 2.1.1), decoded and
 * encoded by Avro C (Debian's libavro-dev).
 *
 * A record is a zero byte, a 4-byte big-endian schema id and the value in
 * Avro's binary encoding.  The writer's schema is asked of the registry
 * once per id (schema_registry.c) and kept, parsed, for the runtime
 * (StmAvroReader, which the source holds): Avro C's schema and a generic
 * value of it that every record with that id is read into, and the
 * schema's own description (AvroType, from its JSON: Avro C 1.11 keeps no
 * logical types, defaults or Debezium's Connect names).
 *
 * Fields go to the declared columns by name, as Avro's schema resolution
 * matches them (a column whose field the writer's schema lacks is the
 * field's default in the schema the columns were taken from, else NULL;
 * fields no column names are ignored), so a topic whose schema evolves
 * keeps flowing: each writer's schema gets its own plan (AvroPlan), made
 * by the parser the first time one of its records comes.  A record of
 * primitive fields (the common one), and a Debezium change event of such
 * rows, is read by Avro C's reader straight into a value of the plan's own
 * instead of the generic one (see "direct decoding" below).  A value becomes
 * its column's type as a JSON value of it would: strings (and enum
 * symbols) by the column type's input function, numbers, booleans, bytes,
 * decimals, dates and times as their PostgreSQL value, cast to the column's
 * type by the assignment cast when it differs, records, maps and arrays as
 * JSON (or an Avro array into a PostgreSQL array column, element by
 * element).
 *
 * Bad records (SPEC 5) are raised as errors: a value not in the wire
 * format, an id the registry does not know, bytes Avro C cannot read with
 * the writer's schema (or bytes left after the value), a value its column
 * cannot take.  A registry that cannot be reached raises a class 08 error
 * instead (schema_registry.c): the batch waits, no record is set aside.
 *
 * Sinks: the output columns as a record schema of nullable fields
 * (stm_avro_record_schema), rows encoded by Avro C into the wire format
 * with the id the registry gave that schema (StmAvroWriter).
 */
#include "postgres.h"

#include <math.h>

#include <avro/errors.h>
#include <avro/generic.h>
#include <avro/io.h>
#include <avro/schema.h>
#include <avro/value.h>

#include "catalog/pg_type.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "parser/parse_coerce.h"
#include "parser/parse_type.h"
#include "port/pg_bitutils.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/date.h"
#include "utils/datum.h"
#include "utils/datetime.h"
#include "utils/float.h"
#include "utils/hsearch.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "avro.h"
#include "catalog.h"
#include "debezium.h"
#include "options.h"
#include "schema_registry.h"
#include "source.h"

/* how long an id the registry did not know is believed unknown */
#define UNKNOWN_ID_RETRY_MS 10000

/* ---- a schema's description, from its JSON ------------------------------ */

typedef struct AvroType AvroType;

struct AvroType
{
	avro_type_t type;			/* never AVRO_LINK: references are resolved */
	StmAvroLogical logical;
	int			precision;		/* decimal */
	int			scale;
	char	   *name;			/* named types: the full name */
	int			nfields;		/* record */
	char	  **field_names;
	AvroType  **field_types;
	char	  **defaults;		/* a field's default: JSON text, or NULL: none */
	char	  **default_strings;	/* a string default: the string itself */
	int			nbranches;		/* union */
	AvroType  **branches;
	AvroType   *items;			/* array items, map values */
	int			nsymbols;		/* enum */
	char	  **symbols;
};

typedef struct TypeBuilder
{
	List	   *named;			/* AvroType with a name, as defined so far */
	int32		id;				/* for messages */
} TypeBuilder;

/* the member key of a JSON object (a container), or NULL */
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

static char *
string_of(JsonbValue *v)
{
	if (v == NULL || v->type != jbvString)
		return NULL;
	return pnstrdup(v->val.string.val, v->val.string.len);
}

static int
int_of(JsonbValue *v, int dflt)
{
	if (v == NULL)
		return dflt;
	if (v->type == jbvNumeric)
		return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v->val.numeric)));
	if (v->type == jbvString)
		return pg_strtoint32(string_of(v));
	return dflt;
}

static bool
is_array(JsonbValue *v)
{
	return v && v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data) &&
		!JsonContainerIsScalar(v->val.binary.data);
}

static int
array_size(JsonbValue *v)
{
	return is_array(v) ? JsonContainerSize(v->val.binary.data) : 0;
}

static JsonbValue *
element(JsonbValue *v, int i)
{
	return getIthJsonbValueFromContainer(v->val.binary.data, i);
}

/* A JSON value as text: a string's contents, anything else as JSON. */
static char *
json_text(JsonbValue *v, bool *is_string)
{
	*is_string = v->type == jbvString;
	switch (v->type)
	{
		case jbvNull:
			return pstrdup("null");
		case jbvString:
			return string_of(v);
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
		default:
			return JsonbToCString(NULL, v->val.binary.data, v->val.binary.len);
	}
}

static AvroType *
new_type(avro_type_t type)
{
	AvroType   *t = palloc0(sizeof(AvroType));

	t->type = type;
	return t;
}

static void
bad_schema(TypeBuilder *b, const char *what) pg_attribute_noreturn();

static void
bad_schema(TypeBuilder *b, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
			 errmsg("Avro schema %d is invalid: %s", b->id, what)));
}

static bool
primitive_type(const char *name, avro_type_t *type)
{
	static const struct
	{
		const char *name;
		avro_type_t type;
	}			primitives[] = {
		{"null", AVRO_NULL}, {"boolean", AVRO_BOOLEAN}, {"int", AVRO_INT32},
		{"long", AVRO_INT64}, {"float", AVRO_FLOAT}, {"double", AVRO_DOUBLE},
		{"bytes", AVRO_BYTES}, {"string", AVRO_STRING}
	};

	for (int i = 0; i < lengthof(primitives); i++)
		if (strcmp(primitives[i].name, name) == 0)
		{
			*type = primitives[i].type;
			return true;
		}
	return false;
}

/* A named type defined earlier: the name as given, or within namespace ns. */
static AvroType *
find_named(TypeBuilder *b, const char *name, const char *ns)
{
	char	   *qualified = (ns && ns[0] && strchr(name, '.') == NULL) ?
		psprintf("%s.%s", ns, name) : NULL;
	ListCell   *lc;

	foreach(lc, b->named)
	{
		AvroType   *t = lfirst(lc);

		if (qualified && strcmp(t->name, qualified) == 0)
			return t;
	}
	foreach(lc, b->named)
	{
		AvroType   *t = lfirst(lc);
		const char *dot = strrchr(t->name, '.');

		if (strcmp(t->name, name) == 0 || (dot && strchr(name, '.') == NULL && strcmp(dot + 1, name) == 0))
			return t;
	}
	return NULL;
}

/*
 * The logical type of a primitive or fixed (Avro's logicalType, or for an
 * int or long without one, Debezium's connect.name); invalid ones are
 * ignored, as the Avro specification says.
 */
static void
set_logical(AvroType *t, JsonbValue *obj)
{
	char	   *lt = string_of(member(obj, "logicalType"));

	if (lt == NULL)
	{
		char	   *connect = string_of(member(obj, "connect.name"));

		if (connect && (t->type == AVRO_INT32 || t->type == AVRO_INT64))
			t->logical = stm_debezium_logical(connect, t->type == AVRO_INT64);
		return;
	}
	if (strcmp(lt, "decimal") == 0 && (t->type == AVRO_BYTES || t->type == AVRO_FIXED))
	{
		t->precision = int_of(member(obj, "precision"), 0);
		t->scale = int_of(member(obj, "scale"), 0);
		if (t->precision > 0 && t->scale >= 0 && t->scale <= t->precision)
			t->logical = STM_AVRO_DECIMAL;
	}
	else if (strcmp(lt, "uuid") == 0 && t->type == AVRO_STRING)
		t->logical = STM_AVRO_UUID;
	else if (strcmp(lt, "date") == 0 && t->type == AVRO_INT32)
		t->logical = STM_AVRO_DATE;
	else if (strcmp(lt, "time-millis") == 0 && t->type == AVRO_INT32)
		t->logical = STM_AVRO_TIME_MILLIS;
	else if (t->type == AVRO_INT64)
	{
		static const struct
		{
			const char *name;
			StmAvroLogical logical;
		}			longs[] = {
			{"time-micros", STM_AVRO_TIME_MICROS},
			{"timestamp-millis", STM_AVRO_TIMESTAMP_MILLIS},
			{"timestamp-micros", STM_AVRO_TIMESTAMP_MICROS},
			{"timestamp-nanos", STM_AVRO_TIMESTAMP_NANOS},
			{"local-timestamp-millis", STM_AVRO_LOCAL_TIMESTAMP_MILLIS},
			{"local-timestamp-micros", STM_AVRO_LOCAL_TIMESTAMP_MICROS},
			{"local-timestamp-nanos", STM_AVRO_LOCAL_TIMESTAMP_NANOS}
		};

		for (int i = 0; i < lengthof(longs); i++)
			if (strcmp(longs[i].name, lt) == 0)
				t->logical = longs[i].logical;
	}
}

static char *
full_name(JsonbValue *obj, const char *ns, char **own_ns)
{
	char	   *name = string_of(member(obj, "name"));
	char	   *space = string_of(member(obj, "namespace"));

	if (name == NULL)
		return NULL;
	if (strchr(name, '.'))
	{
		*own_ns = pnstrdup(name, strrchr(name, '.') - name);
		return name;
	}
	*own_ns = space ? space : (char *) ns;
	return (*own_ns && (*own_ns)[0]) ? psprintf("%s.%s", *own_ns, name) : name;
}

static AvroType *build_type(TypeBuilder *b, JsonbValue *v, const char *ns);

static AvroType *
build_record(TypeBuilder *b, JsonbValue *v, const char *ns)
{
	AvroType   *t = new_type(AVRO_RECORD);
	JsonbValue *fields = member(v, "fields");
	char	   *own_ns = NULL;

	t->name = full_name(v, ns, &own_ns);
	if (t->name == NULL || (fields && !is_array(fields)))
		bad_schema(b, "a record needs a name and an array of fields");
	/* defined before its fields, which may refer to it */
	b->named = lappend(b->named, t);
	t->nfields = array_size(fields);
	t->field_names = palloc0(sizeof(char *) * Max(t->nfields, 1));
	t->field_types = palloc0(sizeof(AvroType *) * Max(t->nfields, 1));
	t->defaults = palloc0(sizeof(char *) * Max(t->nfields, 1));
	t->default_strings = palloc0(sizeof(char *) * Max(t->nfields, 1));
	for (int i = 0; i < t->nfields; i++)
	{
		JsonbValue *f = element(fields, i);
		JsonbValue *dflt = member(f, "default");
		bool		is_string;

		t->field_names[i] = string_of(member(f, "name"));
		if (t->field_names[i] == NULL || member(f, "type") == NULL)
			bad_schema(b, "a record's field needs a name and a type");
		t->field_types[i] = build_type(b, member(f, "type"), own_ns);
		/* a string default keeps its quotes: the text is JSON */
		if (dflt && dflt->type != jbvNull)
		{
			char	   *text = json_text(dflt, &is_string);
			StringInfoData q;

			initStringInfo(&q);
			if (is_string)
			{
				escape_json(&q, text);
				t->default_strings[i] = text;
			}
			else
				appendStringInfoString(&q, text);
			t->defaults[i] = q.data;
		}
	}
	return t;
}

/* A type of the schema: a JSON string (a name), array (a union) or object. */
static AvroType *
build_type(TypeBuilder *b, JsonbValue *v, const char *ns)
{
	AvroType   *t;
	avro_type_t prim;
	char	   *type;

	check_stack_depth();
	if (v->type == jbvString)
	{
		char	   *name = string_of(v);

		if (primitive_type(name, &prim))
			return new_type(prim);
		t = find_named(b, name, ns);
		if (t == NULL)
			bad_schema(b, psprintf("type \"%s\" is not defined", name));
		return t;
	}
	if (is_array(v))
	{
		t = new_type(AVRO_UNION);
		t->nbranches = array_size(v);
		t->branches = palloc(sizeof(AvroType *) * Max(t->nbranches, 1));
		for (int i = 0; i < t->nbranches; i++)
			t->branches[i] = build_type(b, element(v, i), ns);
		return t;
	}
	if (v->type != jbvBinary || member(v, "type") == NULL)
		bad_schema(b, "a type is a name, an array (a union) or an object with a type");
	if (member(v, "type")->type != jbvString)
		return build_type(b, member(v, "type"), ns);
	type = string_of(member(v, "type"));
	if (primitive_type(type, &prim))
	{
		t = new_type(prim);
		set_logical(t, v);
		return t;
	}
	if (strcmp(type, "record") == 0 || strcmp(type, "error") == 0)
		return build_record(b, v, ns);
	if (strcmp(type, "enum") == 0)
	{
		JsonbValue *symbols = member(v, "symbols");
		char	   *own_ns;

		t = new_type(AVRO_ENUM);
		t->name = full_name(v, ns, &own_ns);
		if (t->name == NULL || !is_array(symbols))
			bad_schema(b, "an enum needs a name and symbols");
		t->nsymbols = array_size(symbols);
		t->symbols = palloc(sizeof(char *) * Max(t->nsymbols, 1));
		for (int i = 0; i < t->nsymbols; i++)
			t->symbols[i] = string_of(element(symbols, i));
		b->named = lappend(b->named, t);
		return t;
	}
	if (strcmp(type, "fixed") == 0)
	{
		char	   *own_ns;

		t = new_type(AVRO_FIXED);
		t->name = full_name(v, ns, &own_ns);
		if (t->name == NULL)
			bad_schema(b, "a fixed needs a name");
		set_logical(t, v);
		b->named = lappend(b->named, t);
		return t;
	}
	if (strcmp(type, "array") == 0 || strcmp(type, "map") == 0)
	{
		JsonbValue *items = member(v, strcmp(type, "array") == 0 ? "items" : "values");

		if (items == NULL)
			bad_schema(b, "an array needs items, a map values");
		t = new_type(strcmp(type, "array") == 0 ? AVRO_ARRAY : AVRO_MAP);
		t->items = build_type(b, items, ns);
		return t;
	}
	t = find_named(b, type, ns);
	if (t == NULL)
		bad_schema(b, psprintf("type \"%s\" is not defined", type));
	return t;
}

/* The description of schema text (id for messages), in the current memory context. */
static AvroType *
describe_schema(const char *text, int32 id)
{
	TypeBuilder b = {NIL, id};
	Jsonb	   *j = NULL;
	JsonbValue	root;

	PG_TRY();
	{
		j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(text)));
	}
	PG_CATCH();
	{
		FlushErrorState();
	}
	PG_END_TRY();
	if (j == NULL)
		bad_schema(&b, "it is not JSON");
	if (JB_ROOT_IS_SCALAR(j))
		(void) JsonbExtractScalar(&j->root, &root);
	else
	{
		root.type = jbvBinary;
		root.val.binary.data = &j->root;
		root.val.binary.len = VARSIZE(j) - VARHDRSZ;
	}
	return build_type(&b, &root, NULL);
}

/* A union's one branch that is not null (NULL: none, or several). */
static AvroType *
nullable_branch(AvroType *t)
{
	AvroType   *found = NULL;

	if (t->type != AVRO_UNION)
		return t;
	for (int i = 0; i < t->nbranches; i++)
		if (t->branches[i]->type != AVRO_NULL)
		{
			if (found)
				return NULL;
			found = t->branches[i];
		}
	return found;
}

static int
field_index(AvroType *record, const char *name)
{
	for (int i = 0; i < record->nfields; i++)
		if (strcmp(record->field_names[i], name) == 0)
			return i;
	return -1;
}

/* ---- the runtime's schemas ------------------------------------------------ */

typedef struct AvroSchema
{
	int32		id;				/* the hash key */
	bool		known;			/* the registry has it */
	TimestampTz asked;			/* unknown: when the registry said so */
	char	   *error;			/* why records with it cannot be read (NULL: they can) */
	avro_schema_t schema;
	avro_value_iface_t *iface;
	avro_value_t value;			/* every record with this id is read into it */
	bool		has_value;
	AvroType   *type;
} AvroSchema;

struct StmAvroReader
{
	StmRegistry *registry;
	MemoryContext cxt;			/* the schemas' */
	HTAB	   *schemas;		/* id -> AvroSchema */
	int32		reader_schema_id;	/* the schema the columns were taken from, or -1 */
};

static void
reader_destroy_cb(void *arg)
{
	StmAvroReader *r = arg;
	HASH_SEQ_STATUS seq;
	AvroSchema *s;

	hash_seq_init(&seq, r->schemas);
	while ((s = hash_seq_search(&seq)) != NULL)
	{
		if (s->has_value)
			avro_value_decref(&s->value);
		if (s->iface)
			avro_value_iface_decref(s->iface);
		if (s->schema)
			avro_schema_decref(s->schema);
		s->has_value = false;
		s->iface = NULL;
		s->schema = NULL;
	}
}

/*
 * A source's reader: its registry (options: the source's, schema_registry
 * and reader_schema_id) and the schemas it gives, kept in a memory context
 * of their own below the current one.
 */
StmAvroReader *
stm_avro_reader_open(Jsonb *options, const char *what)
{
	StmAvroReader *r = palloc0(sizeof(StmAvroReader));
	MemoryContextCallback *cb;
	HASHCTL		ctl;

	r->cxt = AllocSetContextCreate(CurrentMemoryContext, "streaming Avro schemas",
								   ALLOCSET_DEFAULT_SIZES);
	r->registry = stm_registry_open(stm_option_jsonb(options, "schema_registry"), what);
	r->reader_schema_id = (int32) stm_option_int64(options, "reader_schema_id", -1);
	ctl.keysize = sizeof(int32);
	ctl.entrysize = sizeof(AvroSchema);
	ctl.hcxt = r->cxt;
	r->schemas = hash_create("streaming Avro schemas", 16, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	cb = MemoryContextAllocZero(r->cxt, sizeof(MemoryContextCallback));
	cb->func = reader_destroy_cb;
	cb->arg = r;
	MemoryContextRegisterResetCallback(r->cxt, cb);
	return r;
}

/* Avro C's schema and a value of it, and the description, for s. */
static void
load_schema(StmAvroReader *r, AvroSchema *s, const char *text)
{
	MemoryContext old = MemoryContextSwitchTo(r->cxt);
	ErrorData  *edata = NULL;

	if (avro_schema_from_json_length(text, strlen(text), &s->schema) != 0)
	{
		s->schema = NULL;
		s->error = psprintf("Avro C cannot read schema %d: %s", s->id, avro_strerror());
	}
	else
	{
		s->iface = avro_generic_class_from_schema(s->schema);
		if (s->iface == NULL || avro_generic_value_new(s->iface, &s->value) != 0)
			s->error = psprintf("Avro C cannot make a value of schema %d: %s", s->id, avro_strerror());
		else
			s->has_value = true;
	}
	if (s->error == NULL)
	{
		PG_TRY();
		{
			s->type = describe_schema(text, s->id);
		}
		PG_CATCH();
		{
			MemoryContextSwitchTo(r->cxt);
			edata = CopyErrorData();
			FlushErrorState();
		}
		PG_END_TRY();
		if (edata)
			s->error = edata->message;
	}
	MemoryContextSwitchTo(old);
}

/*
 * The schema of id, asked of the registry the first time (a registry that
 * cannot be reached raises a class 08 error, and is asked again next
 * time); an id it does not know is asked again after UNKNOWN_ID_RETRY_MS.
 */
static AvroSchema *
get_schema(StmAvroReader *r, int32 id)
{
	bool		found;
	AvroSchema *s = hash_search(r->schemas, &id, HASH_ENTER, &found);
	StmRegistrySchema rs;

	if (!found)
	{
		s->known = false;
		s->asked = 0;
		s->error = NULL;
		s->schema = NULL;
		s->iface = NULL;
		s->has_value = false;
		s->type = NULL;
	}
	if (s->known ||
		(s->asked != 0 &&
		 !TimestampDifferenceExceeds(s->asked, GetCurrentTimestamp(), UNKNOWN_ID_RETRY_MS)))
		return s;
	rs = stm_registry_schema_by_id(r->registry, id);
	if (!rs.found)
	{
		s->asked = GetCurrentTimestamp();
		return s;
	}
	s->known = true;
	load_schema(r, s, rs.text);
	return s;
}

/* ---- values ---------------------------------------------------------------- */

/* Avro's decimal: the unscaled value in big-endian two's complement. */
Datum
stm_avro_decimal(const unsigned char *bytes, int len, int scale)
{
	if (len <= 8)
	{
		int64		u = (len > 0 && (bytes[0] & 0x80)) ? -1 : 0;

		for (int i = 0; i < len; i++)
			u = (int64) (((uint64) u << 8) | bytes[i]);
		return NumericGetDatum(int64_div_fast_to_numeric(u, scale));
	}
	else
	{
		/* a big one: byte by byte, then the sign, then 10^-scale exactly */
		Datum		n = NumericGetDatum(int64_to_numeric(0));
		Datum		b256 = NumericGetDatum(int64_to_numeric(256));

		for (int i = 0; i < len; i++)
			n = DirectFunctionCall2(numeric_add,
									DirectFunctionCall2(numeric_mul, n, b256),
									NumericGetDatum(int64_to_numeric(bytes[i])));
		if (bytes[0] & 0x80)
		{
			Datum		range = NumericGetDatum(int64_to_numeric(1));

			for (int i = 0; i < len; i++)
				range = DirectFunctionCall2(numeric_mul, range, b256);
			n = DirectFunctionCall2(numeric_sub, n, range);
		}
		return DirectFunctionCall2(numeric_mul, n,
								   NumericGetDatum(int64_div_fast_to_numeric(1, scale)));
	}
}

/* An int or long of a logical date or time type, as its PostgreSQL value (and type). */
Datum
stm_avro_logical_datum(StmAvroLogical kind, int64 v, Oid *type)
{
	int64		us = 0;
	bool		overflow = false;

	switch (kind)
	{
		case STM_AVRO_DATE:
			{
				DateADT		d;

				*type = DATEOID;
				if (pg_add_s64_overflow(v, UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE, &us) ||
					us < PG_INT32_MIN || us > PG_INT32_MAX || !IS_VALID_DATE((DateADT) us))
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("date out of range: " INT64_FORMAT " days after 1970-01-01", v)));
				d = (DateADT) us;
				return DateADTGetDatum(d);
			}
		case STM_AVRO_TIME_MILLIS:
		case STM_AVRO_TIME_MICROS:
		case STM_AVRO_TIME_NANOS:
			*type = TIMEOID;
			if (kind == STM_AVRO_TIME_MILLIS)
				overflow = pg_mul_s64_overflow(v, 1000, &us);
			else
				us = kind == STM_AVRO_TIME_NANOS ? v / 1000 : v;
			if (overflow || us < 0 || us > USECS_PER_DAY)
				ereport(ERROR,
						(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
						 errmsg("time of day out of range: " INT64_FORMAT, v)));
			return TimeADTGetDatum(us);
		default:
			{
				bool		local = kind == STM_AVRO_LOCAL_TIMESTAMP_MILLIS ||
					kind == STM_AVRO_LOCAL_TIMESTAMP_MICROS ||
					kind == STM_AVRO_LOCAL_TIMESTAMP_NANOS;

				*type = local ? TIMESTAMPOID : TIMESTAMPTZOID;
				if (kind == STM_AVRO_TIMESTAMP_MILLIS || kind == STM_AVRO_LOCAL_TIMESTAMP_MILLIS)
					overflow = pg_mul_s64_overflow(v, 1000, &us);
				else if (kind == STM_AVRO_TIMESTAMP_NANOS || kind == STM_AVRO_LOCAL_TIMESTAMP_NANOS)
					us = v / 1000 - (v % 1000 < 0 ? 1 : 0);
				else
					us = v;
				if (overflow || pg_add_s64_overflow(us, STM_UNIX_EPOCH, &us) || !IS_VALID_TIMESTAMP(us))
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("timestamp out of range: " INT64_FORMAT " after 1970-01-01", v)));
				return TimestampGetDatum(us);
			}
	}
}

/* An Avro string (UTF-8, NUL-terminated at size - 1) in the database's encoding. */
static char *
server_string(const char *s, size_t size)
{
	return pg_any_to_server(s, (int) size - 1, PG_UTF8);
}

static void
append_hex(StringInfo buf, const void *data, size_t len)
{
	char	   *hex = palloc(len * 2 + 3);

	hex[0] = '\\';
	hex[1] = 'x';
	hex[hex_encode(data, len, hex + 2) + 2] = '\0';
	escape_json(buf, hex);
	pfree(hex);
}

/* A value as JSON: unions as their branch, bytes as "\x..." hex, logical types as JSON writes PostgreSQL's. */
static void
append_json(StringInfo buf, avro_value_t *v, AvroType *t)
{
	avro_value_t child;
	const char *key;
	size_t		n;

	check_stack_depth();
	while (t->type == AVRO_UNION)
	{
		int			disc;

		avro_value_get_discriminant(v, &disc);
		avro_value_get_current_branch(v, &child);
		t = t->branches[disc];
		*v = child;
	}
	switch (t->type)
	{
		case AVRO_NULL:
			appendStringInfoString(buf, "null");
			break;
		case AVRO_BOOLEAN:
			{
				int			b;

				avro_value_get_boolean(v, &b);
				appendStringInfoString(buf, b ? "true" : "false");
				break;
			}
		case AVRO_INT32:
		case AVRO_INT64:
			{
				int64		l = 0;
				int32		i;

				if (t->type == AVRO_INT32)
				{
					avro_value_get_int(v, &i);
					l = i;
				}
				else
					avro_value_get_long(v, &l);
				if (t->logical != STM_AVRO_PLAIN)
				{
					Oid			type;
					Datum		d = stm_avro_logical_datum(t->logical, l, &type);
					char		dt[MAXDATELEN + 1];

					appendStringInfoChar(buf, '"');
					appendStringInfoString(buf, JsonEncodeDateTime(dt, d, type, NULL));
					appendStringInfoChar(buf, '"');
				}
				else
					appendStringInfo(buf, INT64_FORMAT, l);
				break;
			}
		case AVRO_FLOAT:
		case AVRO_DOUBLE:
			{
				double		d;
				float		f;
				char	   *s;

				if (t->type == AVRO_FLOAT)
				{
					avro_value_get_float(v, &f);
					s = DatumGetCString(DirectFunctionCall1(float4out, Float4GetDatum(f)));
					d = f;
				}
				else
				{
					avro_value_get_double(v, &d);
					s = float8out_internal(d);
				}
				if (isnan(d) || isinf(d))
					escape_json(buf, s);
				else
					appendStringInfoString(buf, s);
				break;
			}
		case AVRO_STRING:
			{
				const char *s;

				avro_value_get_string(v, &s, &n);
				escape_json(buf, server_string(s, n));
				break;
			}
		case AVRO_BYTES:
		case AVRO_FIXED:
			{
				const void *data;

				if (t->type == AVRO_BYTES)
					avro_value_get_bytes(v, &data, &n);
				else
					avro_value_get_fixed(v, &data, &n);
				if (t->logical == STM_AVRO_DECIMAL)
					appendStringInfoString(buf,
										   DatumGetCString(DirectFunctionCall1(numeric_out,
																			   stm_avro_decimal(data, n, t->scale))));
				else
					append_hex(buf, data, n);
				break;
			}
		case AVRO_ENUM:
			{
				int			e;

				avro_value_get_enum(v, &e);
				escape_json(buf, e >= 0 && e < t->nsymbols ? t->symbols[e] : "");
				break;
			}
		case AVRO_RECORD:
			appendStringInfoChar(buf, '{');
			for (int i = 0; i < t->nfields; i++)
			{
				avro_value_get_by_index(v, i, &child, NULL);
				if (i > 0)
					appendStringInfoString(buf, ", ");
				escape_json(buf, t->field_names[i]);
				appendStringInfoString(buf, ": ");
				append_json(buf, &child, t->field_types[i]);
			}
			appendStringInfoChar(buf, '}');
			break;
		case AVRO_MAP:
		case AVRO_ARRAY:
			avro_value_get_size(v, &n);
			appendStringInfoChar(buf, t->type == AVRO_MAP ? '{' : '[');
			for (size_t i = 0; i < n; i++)
			{
				avro_value_get_by_index(v, i, &child, &key);
				if (i > 0)
					appendStringInfoString(buf, ", ");
				if (t->type == AVRO_MAP)
				{
					escape_json(buf, server_string(key, strlen(key) + 1));
					appendStringInfoString(buf, ": ");
				}
				append_json(buf, &child, t->items);
			}
			appendStringInfoChar(buf, t->type == AVRO_MAP ? '}' : ']');
			break;
		default:
			elog(ERROR, "unexpected Avro type %d", (int) t->type);
	}
}

/* ---- a batch's parser ------------------------------------------------------ */

/* What a column (or an array column's element) takes, and how. */
typedef struct AvroColumn
{
	MemoryContext cxt;			/* where its cached functions live (the parser's) */
	StmTextTarget *t;			/* what a text becomes */
	bool		domain;			/* a domain: values go through its input function */
	Oid			cast_from;		/* the type cast_path was found for (InvalidOid: none yet) */
	CoercionPathType cast_path;
	FmgrInfo	cast_fn;
	FmgrInfo	out_fn;			/* cast_from's output function (a cast through text) */
	bool		typmod_known;
	bool		has_typmod_fn;
	FmgrInfo	typmod_fn;
	struct AvroColumn *elem;	/* an array column: its elements */
	int16		elmlen;
	bool		elmbyval;
	char		elmalign;
} AvroColumn;

/* The side of a change event (or the value itself) a row is read from. */
typedef struct AvroRow
{
	AvroType   *record;
	int		   *field;			/* per row column: its field, or -1 */
	char	  **dflt;			/* per row column without a field: a default (JSON), or NULL */
	char	  **dflt_string;	/* a string default: the string */
} AvroRow;

/* How the records of one writer's schema become rows. */
typedef struct AvroPlan
{
	int32		id;				/* the hash key */
	AvroSchema *schema;
	char	   *error;			/* the records cannot give rows: why */
	bool		whole;			/* not a record: the value is the one column */
	AvroRow		row;			/* the value's fields, or an event's after */
	AvroRow		before;			/* debezium: the event's before */
	int			f_before;		/* debezium: fields of the event */
	int			f_after;
	int			f_op;
	int			f_ts;
	bool		direct_planned;	/* direct: decided */
	struct DirectRecord *direct;	/* the direct reading of its records, or NULL */
} AvroPlan;

struct StmAvroParser
{
	MemoryContext cxt;			/* the parser's: plans outlive a chunk's records */
	StmAvroReader *reader;
	StmParser  *p;
	avro_reader_t in;			/* pointed at each record */
	HTAB	   *plans;			/* id -> AvroPlan */
	AvroPlan   *last;			/* the last record's */
	AvroColumn *cols;			/* per row column */
	AvroColumn *ts_col;			/* debezium: ts_ms as a bigint (made at the first event) */
	AvroType   *key_type;		/* kafka_key_avro's jsonb */
};

static int	direct_reset(const avro_value_iface_t *iface, void *self);

static void
parser_destroy_cb(void *arg)
{
	StmAvroParser *ap = arg;
	HASH_SEQ_STATUS seq;
	AvroPlan   *plan;

	/* what a record that failed to convert handed over */
	hash_seq_init(&seq, ap->plans);
	while ((plan = hash_seq_search(&seq)) != NULL)
		if (plan->direct)
			(void) direct_reset(NULL, plan->direct);
	if (ap->in)
		avro_reader_free(ap->in);
	ap->in = NULL;
}

static void
init_column(AvroColumn *c, StmTextTarget *t)
{
	Oid			elem = get_element_type(t->type);

	memset(c, 0, sizeof(AvroColumn));
	c->cxt = CurrentMemoryContext;
	c->t = t;
	c->domain = getBaseType(t->type) != t->type;
	if (OidIsValid(elem) && !c->domain && !t->wants_json)
	{
		StmTextTarget *et = palloc(sizeof(StmTextTarget));

		stm_text_target_init(et, elem, t->typmod);
		c->elem = palloc(sizeof(AvroColumn));
		init_column(c->elem, et);
		get_typlenbyvalalign(elem, &c->elmlen, &c->elmbyval, &c->elmalign);
	}
}

/* A batch's parser of the source's Avro records (and keys), in the current memory context. */
StmAvroParser *
stm_avro_parser_new(StmAvroReader *reader, StmParser *p)
{
	StmAvroParser *ap = palloc0(sizeof(StmAvroParser));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	HASHCTL		ctl;

	ap->cxt = CurrentMemoryContext;
	ap->reader = reader;
	ap->p = p;
	ap->in = avro_reader_memory("", 0);
	cb->func = parser_destroy_cb;
	cb->arg = ap;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	ctl.keysize = sizeof(int32);
	ctl.entrysize = sizeof(AvroPlan);
	ctl.hcxt = CurrentMemoryContext;
	ap->plans = hash_create("streaming Avro plans", 16, &ctl, HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	ap->cols = palloc(sizeof(AvroColumn) * Max(p->nrow, 1));
	for (int i = 0; i < p->nrow; i++)
		init_column(&ap->cols[i], &p->targets[i]);
	return ap;
}

/* The schema id of a record in the wire format (or the error that it is not). */
static int32
wire_id(const char *data, int len)
{
	const unsigned char *u = (const unsigned char *) data;

	if (len < 5 || u[0] != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("record is not in the Avro wire format"),
				 len < 5 ?
				 errdetail("It has %d bytes; the wire format is a zero byte, a 4-byte schema id and the Avro value.", len) :
				 errdetail("Its first byte is 0x%02x; the wire format is a zero byte, a 4-byte schema id and the Avro value.", u[0])));
	return (int32) (((uint32) u[1] << 24) | ((uint32) u[2] << 16) | ((uint32) u[3] << 8) | u[4]);
}

/* The record of a union's branches (an event's before or after), or NULL. */
static AvroType *
record_branch(AvroType *t)
{
	if (t == NULL)
		return NULL;
	if (t->type == AVRO_RECORD)
		return t;
	for (int i = 0; t->type == AVRO_UNION && i < t->nbranches; i++)
		if (t->branches[i]->type == AVRO_RECORD)
			return t->branches[i];
	return NULL;
}

/* The record a source's rows are read from: the value's, or a change event's after (or before). */
static AvroType *
row_record(AvroType *t, bool debezium, int *f_before, int *f_after, int *f_op, int *f_ts)
{
	AvroType   *row;

	if (!debezium)
		return t;
	if (t->type != AVRO_RECORD)
		return NULL;
	*f_before = field_index(t, "before");
	*f_after = field_index(t, "after");
	*f_op = field_index(t, "op");
	*f_ts = field_index(t, "ts_ms");
	row = *f_after >= 0 ? record_branch(t->field_types[*f_after]) : NULL;
	if (row == NULL && *f_before >= 0)
		row = record_branch(t->field_types[*f_before]);
	return (*f_op >= 0) ? row : NULL;
}

/*
 * The defaults of the schema the columns came from (reader_schema_id), for
 * the columns that a writer's record lacks.
 */
static void
plan_row(StmAvroParser *ap, AvroRow *row, AvroType *record)
{
	StmParser  *p = ap->p;
	AvroType   *reader_row = NULL;

	row->record = record;
	row->field = palloc(sizeof(int) * Max(p->nrow, 1));
	row->dflt = palloc0(sizeof(char *) * Max(p->nrow, 1));
	row->dflt_string = palloc0(sizeof(char *) * Max(p->nrow, 1));
	for (int i = 0; i < p->nrow; i++)
	{
		row->field[i] = record ? field_index(record, p->names[i]) : -1;
		if (row->field[i] >= 0 || ap->reader->reader_schema_id < 0)
			continue;
		if (reader_row == NULL)
		{
			AvroSchema *rs = get_schema(ap->reader, ap->reader->reader_schema_id);
			int			a, b, c, d;

			if (rs->known && rs->error == NULL)
				reader_row = row_record(rs->type, p->envelope == STM_ENVELOPE_DEBEZIUM, &a, &b, &c, &d);
			if (reader_row == NULL || reader_row->type != AVRO_RECORD)
				break;
		}
		if (field_index(reader_row, p->names[i]) >= 0)
		{
			row->dflt[i] = reader_row->defaults[field_index(reader_row, p->names[i])];
			row->dflt_string[i] = reader_row->default_strings[field_index(reader_row, p->names[i])];
		}
	}
}

/* The plan of schema id: made the first time one of its records comes. */
static AvroPlan *
plan_of(StmAvroParser *ap, int32 id)
{
	StmParser  *p = ap->p;
	bool		found;
	AvroSchema *s;
	AvroPlan   *plan;
	AvroType   *row;
	MemoryContext oldcxt;

	if (ap->last && ap->last->id == id)
		return ap->last;
	plan = hash_search(ap->plans, &id, HASH_FIND, &found);
	if (plan)
		return ap->last = plan;
	s = get_schema(ap->reader, id);
	if (!s->known)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("unknown schema id %d in Avro record", id),
				 errdetail("The schema registry at %s has no schema with this id.",
						   stm_registry_url(ap->reader->registry))));
	/* the plan lives as long as the parser, not in the records' memory */
	oldcxt = MemoryContextSwitchTo(ap->cxt);
	plan = hash_search(ap->plans, &id, HASH_ENTER, &found);
	memset(((char *) plan) + sizeof(int32), 0, sizeof(AvroPlan) - sizeof(int32));
	plan->schema = s;
	plan->f_before = plan->f_after = plan->f_op = plan->f_ts = -1;
	if (s->error)
		plan->error = s->error;
	else if ((row = row_record(s->type, p->envelope == STM_ENVELOPE_DEBEZIUM, &plan->f_before,
							   &plan->f_after, &plan->f_op, &plan->f_ts)) == NULL)
		plan->error = psprintf("schema %d is not a Debezium change event (a record of before, after and op)", id);
	else if (row->type != AVRO_RECORD && p->nrow == 1 && !p->has_columns)
		plan->whole = true;
	else if (row->type != AVRO_RECORD)
		plan->error = psprintf("schema %d is not a record", id);
	else
	{
		plan_row(ap, &plan->row, row);
		if (plan->f_before >= 0)
		{
			AvroType   *before = record_branch(s->type->field_types[plan->f_before]);

			if (before == row)
				plan->before = plan->row;
			else
				plan_row(ap, &plan->before, before);
		}
	}
	MemoryContextSwitchTo(oldcxt);
	return ap->last = plan;
}

/*
 * Avro C reads the record into its schema's value; nothing may be left over.
 *
 * Avro C's errors cost a formatted message each (and a failed read
 * prefixes its message to the last one), so the common record makes none:
 * a value whose binary encoding (avro_value_sizeof: the shortest, one
 * block per array or map) is as long as the record took all of it, as no
 * encoding of a value is shorter than that; only another record is asked
 * with a skip whether bytes are left.  A record that cannot be read is read
 * again from a cleared error, so that its message is its own.
 */
static avro_value_t *
decode(StmAvroParser *ap, AvroSchema *s, const char *data, int len)
{
	size_t		size;

	avro_reader_memory_set_source(ap->in, data, len);
	if (avro_value_read(ap->in, &s->value) != 0)
	{
		avro_set_error("%s", "");
		avro_reader_memory_set_source(ap->in, data, len);
		(void) avro_value_read(ap->in, &s->value);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("malformed Avro record"),
				 errdetail("Avro C could not read it with schema %d: %s", s->id, avro_strerror())));
	}
	if (avro_value_sizeof(&s->value, &size) == 0 && size == (size_t) len)
		return &s->value;
	if (avro_skip(ap->in, 1) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("malformed Avro record"),
				 errdetail("Bytes are left after the value that schema %d describes.", s->id)));
	return &s->value;
}

/* The column's typmod applied to a value of its own type (numeric(12,2), timestamptz(3)). */
static Datum
apply_typmod(AvroColumn *c, Datum d)
{
	if (c->t->typmod < 0)
		return d;
	if (!c->typmod_known)
	{
		Oid			fn;

		c->has_typmod_fn = find_typmod_coercion_function(c->t->type, &fn) == COERCION_PATH_FUNC;
		if (c->has_typmod_fn)
			fmgr_info_cxt(fn, &c->typmod_fn, c->cxt);
		c->typmod_known = true;
	}
	if (!c->has_typmod_fn)
		return d;
	return FunctionCall3(&c->typmod_fn, d, Int32GetDatum(c->t->typmod), BoolGetDatum(false));
}

/*
 * A PostgreSQL value of type (the field's own: an int, a date, a numeric)
 * into the column: as it is, or by the assignment cast, or through text
 * (the type's output, the column's input), as INSERT would take it.
 */
static Datum
natural_to_column(AvroColumn *c, Datum d, Oid type)
{
	if (type == c->t->type)
		return apply_typmod(c, d);
	if (c->cast_from != type)
	{
		Oid			fn = InvalidOid;
		bool		varlena;

		c->cast_path = c->domain ? COERCION_PATH_COERCEVIAIO :
			find_coercion_pathway(c->t->type, type, COERCION_ASSIGNMENT, &fn);
		if (c->cast_path == COERCION_PATH_FUNC)
			fmgr_info_cxt(fn, &c->cast_fn, c->cxt);
		getTypeOutputInfo(type, &fn, &varlena);
		fmgr_info_cxt(fn, &c->out_fn, c->cxt);
		c->cast_from = type;
	}
	switch (c->cast_path)
	{
		case COERCION_PATH_FUNC:
			d = c->cast_fn.fn_nargs == 1 ? FunctionCall1(&c->cast_fn, d) :
				FunctionCall3(&c->cast_fn, d, Int32GetDatum(-1), BoolGetDatum(false));
			return apply_typmod(c, d);
		case COERCION_PATH_RELABELTYPE:
			return apply_typmod(c, d);
		default:
			return stm_text_target_convert(c->t, OutputFunctionCall(&c->out_fn, d), -1);
	}
}

static Datum to_column(AvroColumn *c, avro_value_t v, AvroType *t, bool *isnull);

/* An Avro array into a PostgreSQL array column, element by element. */
static Datum
array_to_column(AvroColumn *c, avro_value_t *v, AvroType *t)
{
	size_t		n;
	Datum	   *elems;
	bool	   *enulls;
	int			dims[1];
	int			lbs[1] = {1};

	avro_value_get_size(v, &n);
	if (n == 0)
		return PointerGetDatum(construct_empty_array(c->elem->t->type));
	elems = palloc(sizeof(Datum) * n);
	enulls = palloc(sizeof(bool) * n);
	for (size_t i = 0; i < n; i++)
	{
		avro_value_t e;

		avro_value_get_by_index(v, i, &e, NULL);
		elems[i] = to_column(c->elem, e, t->items, &enulls[i]);
	}
	dims[0] = (int) n;
	return PointerGetDatum(construct_md_array(elems, enulls, 1, dims, lbs, c->elem->t->type,
											  c->elmlen, c->elmbyval, c->elmalign));
}

/* A primitive Avro value (AVRO_NULL through AVRO_ENUM but records, arrays and maps), as read. */
typedef struct AvroScalar
{
	int64		l;				/* boolean, int, long, enum */
	double		d;				/* float, double */
	const void *data;			/* string (NUL-terminated, size with the NUL), bytes, fixed */
	size_t		size;
} AvroScalar;

/*
 * A primitive value of type t as the column's value (also the direct
 * decoding's: one conversion for both ways of reading a record).
 */
static Datum
scalar_to_column(AvroColumn *c, AvroType *t, const AvroScalar *v)
{
	Oid			ctype = c->t->type;

	switch (t->type)
	{
		case AVRO_STRING:
			{
				char	   *str = server_string(v->data, v->size);

				return stm_text_target_convert(c->t, str, str == v->data ? (int) v->size - 1 : -1);
			}
		case AVRO_BOOLEAN:
			return natural_to_column(c, BoolGetDatum(v->l != 0), BOOLOID);
		case AVRO_INT32:
		case AVRO_INT64:
			if (t->logical != STM_AVRO_PLAIN)
			{
				Oid			type;
				Datum		d = stm_avro_logical_datum(t->logical, v->l, &type);

				return natural_to_column(c, d, type);
			}
			if (ctype == INT8OID)
				return Int64GetDatum(v->l);
			if (t->type == AVRO_INT32)
				return natural_to_column(c, Int32GetDatum((int32) v->l), INT4OID);
			return natural_to_column(c, Int64GetDatum(v->l), INT8OID);
		case AVRO_FLOAT:
			if (ctype == FLOAT8OID)
				return Float8GetDatum(v->d);
			return natural_to_column(c, Float4GetDatum((float) v->d), FLOAT4OID);
		case AVRO_DOUBLE:
			if (ctype == FLOAT8OID)
				return Float8GetDatum(v->d);
			return natural_to_column(c, Float8GetDatum(v->d), FLOAT8OID);
		case AVRO_BYTES:
		case AVRO_FIXED:
			{
				bytea	   *b;

				if (t->logical == STM_AVRO_DECIMAL)
					return natural_to_column(c, stm_avro_decimal(v->data, v->size, t->scale), NUMERICOID);
				b = palloc(v->size + VARHDRSZ);
				SET_VARSIZE(b, v->size + VARHDRSZ);
				memcpy(VARDATA(b), v->data, v->size);
				return natural_to_column(c, PointerGetDatum(b), BYTEAOID);
			}
		case AVRO_ENUM:
			if (v->l < 0 || v->l >= t->nsymbols)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
						 errmsg("malformed Avro record"),
						 errdetail("Enum %s has no symbol %d.", t->name, (int) v->l)));
			return stm_text_target_convert(c->t, t->symbols[v->l], -1);
		default:
			elog(ERROR, "Avro type %d is not a primitive one", (int) t->type);
			return (Datum) 0;	/* keep the compiler quiet */
	}
}

/* One value of the record (of type t) as the column's value. */
static Datum
to_column(AvroColumn *c, avro_value_t v, AvroType *t, bool *isnull)
{
	AvroScalar	sv = {0};

	while (t->type == AVRO_UNION)
	{
		int			disc;
		avro_value_t branch;

		avro_value_get_discriminant(&v, &disc);
		avro_value_get_current_branch(&v, &branch);
		t = t->branches[disc];
		v = branch;
	}
	*isnull = t->type == AVRO_NULL;
	if (*isnull)
		return (Datum) 0;
	if (c->t->wants_json)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		append_json(&buf, &v, t);
		return stm_text_target_convert(c->t, buf.data, buf.len);
	}
	if (c->elem && t->type == AVRO_ARRAY)
		return array_to_column(c, &v, t);
	switch (t->type)
	{
		case AVRO_STRING:
			{
				const char *str;

				avro_value_get_string(&v, &str, &sv.size);
				sv.data = str;
				break;
			}
		case AVRO_BOOLEAN:
			{
				int			b;

				avro_value_get_boolean(&v, &b);
				sv.l = b;
				break;
			}
		case AVRO_INT32:
			{
				int32		i;

				avro_value_get_int(&v, &i);
				sv.l = i;
				break;
			}
		case AVRO_INT64:
			{
				int64_t		l;

				avro_value_get_long(&v, &l);
				sv.l = l;
				break;
			}
		case AVRO_FLOAT:
			{
				float		f;

				avro_value_get_float(&v, &f);
				sv.d = f;
				break;
			}
		case AVRO_DOUBLE:
			avro_value_get_double(&v, &sv.d);
			break;
		case AVRO_BYTES:
			avro_value_get_bytes(&v, &sv.data, &sv.size);
			break;
		case AVRO_FIXED:
			avro_value_get_fixed(&v, &sv.data, &sv.size);
			break;
		case AVRO_ENUM:
			{
				int			e;

				avro_value_get_enum(&v, &e);
				sv.l = e;
				break;
			}
		default:
			{
				/* records, maps and arrays: their JSON */
				StringInfoData buf;

				initStringInfo(&buf);
				append_json(&buf, &v, t);
				return stm_text_target_convert(c->t, buf.data, buf.len);
			}
	}
	return scalar_to_column(c, t, &sv);
}

/* A column the writer's record lacks: its default (JSON, or a string's text), or NULL. */
static Datum
default_value(AvroColumn *c, const char *dflt, const char *dflt_string, bool *isnull)
{
	*isnull = dflt == NULL;
	if (dflt == NULL)
		return (Datum) 0;
	return stm_text_target_convert(c->t, pstrdup(c->t->wants_json || dflt_string == NULL ?
												 dflt : dflt_string), -1);
}

/* A string field of the event (op): its text, or NULL. */
static char *
event_string(avro_value_t *event, int f, AvroType *type, int *len)
{
	avro_value_t v;
	const char *s;
	size_t		size;

	if (f < 0)
		return NULL;
	avro_value_get_by_index(event, f, &v, NULL);
	type = type->field_types[f];
	while (type->type == AVRO_UNION)
	{
		int			disc;
		avro_value_t b;

		avro_value_get_discriminant(&v, &disc);
		avro_value_get_current_branch(&v, &b);
		type = type->branches[disc];
		v = b;
	}
	if (type->type != AVRO_STRING)
		return NULL;
	avro_value_get_string(&v, &s, &size);
	*len = (int) size - 1;
	return (char *) s;
}

/* ts_ms's column (a bigint), once per parser: the lookups of the type (and a cast's) are not an event's */
static void
make_ts_col(StmAvroParser *ap)
{
	MemoryContext oldcxt = MemoryContextSwitchTo(ap->cxt);
	StmTextTarget *tt = palloc(sizeof(StmTextTarget));

	stm_text_target_init(tt, INT8OID, -1);
	ap->ts_col = palloc(sizeof(AvroColumn));
	init_column(ap->ts_col, tt);
	MemoryContextSwitchTo(oldcxt);
}

/*
 * A change event: cdc_op and cdc_ts into the parser, and the record of
 * the row: after (c, u, r) or before (d).  Returns the row (NULL: none).
 */
static AvroRow *
event_row(StmAvroParser *ap, AvroPlan *plan, avro_value_t *event, avro_value_t *rec)
{
	StmParser  *p = ap->p;
	AvroType   *et = plan->schema->type;
	int			len = 0;
	char	   *op = event_string(event, plan->f_op, et, &len);
	int			f;
	avro_value_t v;
	AvroType   *t;

	if (op == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
				 errmsg("Debezium change event has no op")));
	p->cdc_op = stm_debezium_op(op, len);
	p->has_cdc_ts = false;
	if (plan->f_ts >= 0)
	{
		bool		isnull;

		if (ap->ts_col == NULL)
			make_ts_col(ap);
		avro_value_get_by_index(event, plan->f_ts, &v, NULL);
		p->cdc_ts_ms = DatumGetInt64(to_column(ap->ts_col, v, et->field_types[plan->f_ts], &isnull));
		p->has_cdc_ts = !isnull;
	}
	f = p->cdc_op == 'd' ? plan->f_before : plan->f_after;
	if (f < 0)
		return NULL;
	avro_value_get_by_index(event, f, &v, NULL);
	t = et->field_types[f];
	while (t->type == AVRO_UNION)
	{
		int			disc;
		avro_value_t b;

		avro_value_get_discriminant(&v, &disc);
		avro_value_get_current_branch(&v, &b);
		t = t->branches[disc];
		v = b;
	}
	if (t->type != AVRO_RECORD)
		return NULL;
	*rec = v;
	return p->cdc_op == 'd' ? &plan->before : &plan->row;
}

/* ---- direct decoding ------------------------------------------------------ */

/*
 * The common record (a record whose fields the columns name are
 * primitives, or unions of primitives such as ["null", "string"], none of
 * them a json column) is read by Avro C's own reader, avro_value_read,
 * into a value of ours (DirectRecord, whose avro_value_iface_t takes what
 * the reader sets) instead of a generic value: each field's value is kept
 * as it comes and converted by scalar_to_column, as the generic value's
 * would be, without the generic value's reset, copies and walks.  Strings
 * and bytes come as Avro C's buffers, handed over and freed once converted.
 * So is a Debezium change event (its before and after records, or unions of
 * null and a record, whose fields the columns name are as above; op and
 * ts_ms primitives): both sides' fields are kept, and op says which one is
 * the row.  Nested records no column takes (an event's source) are read
 * into nodes that keep nothing, when all their fields are of these kinds.
 * As the reader sets each value, the size of its shortest encoding is
 * added up, so that a record the value took whole needs no skip (decode);
 * fields of other kinds that no column takes are skipped by Avro C (then
 * the skip says whether bytes are left).  A record that fails, or has
 * bytes left, or an event without the side its op names, is read again the
 * generic way, which says what is wrong.  In test builds every record read
 * directly is read the generic way too and the two rows (and an event's
 * cdc_op and cdc_ts) compared (check_direct).
 */

typedef struct DirectRecord DirectRecord;
typedef struct DirectValue DirectValue;

/* One node of the writer's record: a field, a branch of a field's union, a nested record's field. */
typedef struct DirectNode
{
	DirectRecord *rec;
	avro_type_t type;			/* what get_type says */
	avro_schema_t schema;		/* Avro C's (fixed: for its size; a record: its fields') */
	AvroType   *atype;			/* ours (a branch's: its own) */
	DirectValue *target;		/* the value it fills (a record: says it came), or NULL: read for its size only */
	bool		skipped;		/* a field: Avro C skips it (no node) */
	int			nbranches;		/* a union's */
	struct DirectNode *branches;
	int			nfields;		/* a record's */
	struct DirectNode *fields;
} DirectNode;

/* A column's value (or op's, ts_ms's, a side's) as the reader set it. */
struct DirectValue
{
	AvroType   *atype;			/* the type it came as (a union's branch); NULL: never set */
	AvroScalar	v;
	avro_wrapped_buffer_t buf;	/* a string's, bytes' or fixed's, until converted */
	bool		has_buf;
};

/* the values of a plan's direct reading: a side's columns, then an event's own */
#define DV_AFTER(dr, i)		(&(dr)->values[(i)])
#define DV_BEFORE(dr, i)	(&(dr)->values[(dr)->nrow + (i)])
#define DV_OP(dr)			(&(dr)->values[2 * (dr)->nrow])
#define DV_TS(dr)			(&(dr)->values[2 * (dr)->nrow + 1])
#define DV_SIDE(dr, side)	(&(dr)->values[2 * (dr)->nrow + 2 + (side)])
#define DV_COUNT(nrow)		(2 * (nrow) + 4)

struct DirectRecord
{
	avro_schema_t schema;		/* the writer's record */
	int			nrow;
	bool		event;			/* a Debezium change event */
	int			nfields;
	DirectNode *fields;			/* per field of the writer's record */
	DirectValue *values;		/* DV_COUNT(nrow) of them */
	DirectValue **held;			/* the values that hold a buffer */
	int			nheld;
	size_t		size;			/* of the shortest encoding of what was read */
	bool		size_known;		/* false: a field was skipped */
};

/* a long's zigzag varint: its length in bytes (7 bits a byte) */
static inline size_t
varint_size(int64 v)
{
	uint64		u = ((uint64) v << 1) ^ (uint64) (v >> 63);

	return u < 0x80 ? 1 : (pg_leftmost_one_pos64(u) + 7) / 7;
}

static void
keep_scalar(DirectNode *n, const AvroScalar *v, size_t size)
{
	DirectValue *dv = n->target;

	n->rec->size += size;
	if (dv)
	{
		dv->atype = n->atype;
		dv->v = *v;
	}
}

/* a handed-over buffer: kept until the column is converted (or dropped, for a node of no column) */
static int
keep_buffer(DirectNode *n, avro_wrapped_buffer_t *buf, size_t len, bool sized)
{
	DirectValue *dv = n->target;
	AvroScalar	v = {0};

	v.data = buf->buf;
	v.size = buf->size;
	keep_scalar(n, &v, (sized ? varint_size((int64) len) : 0) + len);
	if (dv == NULL)
	{
		avro_wrapped_buffer_free(buf);
		return 0;
	}
	if (dv->has_buf)
		avro_wrapped_buffer_free(&dv->buf);
	else
		n->rec->held[n->rec->nheld++] = dv;
	dv->buf = *buf;
	dv->has_buf = true;
	return 0;
}

static avro_type_t
direct_get_type(const avro_value_iface_t *iface, const void *self)
{
	return ((const DirectNode *) self)->type;
}

static avro_schema_t
direct_get_schema(const avro_value_iface_t *iface, const void *self)
{
	return ((const DirectNode *) self)->schema;
}

static int
direct_set_null(const avro_value_iface_t *iface, void *self)
{
	AvroScalar	v = {0};

	keep_scalar(self, &v, 0);
	return 0;
}

static int
direct_set_boolean(const avro_value_iface_t *iface, void *self, int val)
{
	AvroScalar	v = {0};

	v.l = val;
	keep_scalar(self, &v, 1);
	return 0;
}

static int
direct_set_int(const avro_value_iface_t *iface, void *self, int32_t val)
{
	AvroScalar	v = {0};

	v.l = val;
	keep_scalar(self, &v, varint_size(val));
	return 0;
}

static int
direct_set_long(const avro_value_iface_t *iface, void *self, int64_t val)
{
	AvroScalar	v = {0};

	v.l = val;
	keep_scalar(self, &v, varint_size(val));
	return 0;
}

static int
direct_set_enum(const avro_value_iface_t *iface, void *self, int val)
{
	return direct_set_long(iface, self, val);
}

static int
direct_set_float(const avro_value_iface_t *iface, void *self, float val)
{
	AvroScalar	v = {0};

	v.d = val;
	keep_scalar(self, &v, 4);
	return 0;
}

static int
direct_set_double(const avro_value_iface_t *iface, void *self, double val)
{
	AvroScalar	v = {0};

	v.d = val;
	keep_scalar(self, &v, 8);
	return 0;
}

/* a string's buffer holds its NUL, which the encoding does not */
static int
direct_give_string_len(const avro_value_iface_t *iface, void *self, avro_wrapped_buffer_t *buf)
{
	return keep_buffer(self, buf, buf->size - 1, true);
}

static int
direct_give_bytes(const avro_value_iface_t *iface, void *self, avro_wrapped_buffer_t *buf)
{
	return keep_buffer(self, buf, buf->size, true);
}

static int
direct_give_fixed(const avro_value_iface_t *iface, void *self, avro_wrapped_buffer_t *buf)
{
	return keep_buffer(self, buf, buf->size, false);
}

static const avro_value_iface_t direct_node_iface;
static const avro_value_iface_t direct_nested_iface;

/* a node as Avro C's value: a nested record's interface, or a primitive's */
static void
node_as_value(DirectNode *n, avro_value_t *v)
{
	v->iface = (avro_value_iface_t *) (n->type == AVRO_RECORD ? &direct_nested_iface : &direct_node_iface);
	v->self = n;
}

static int
direct_set_branch(const avro_value_iface_t *iface, void *self, int discriminant,
				  avro_value_t *branch)
{
	DirectNode *n = self;

	if (discriminant < 0 || discriminant >= n->nbranches)
	{
		avro_set_error("Branch index %d out of range", discriminant);
		return EINVAL;
	}
	n->rec->size += varint_size(discriminant);
	node_as_value(&n->branches[discriminant], branch);
	return 0;
}

/* the nodes: fields and branches */
static const avro_value_iface_t direct_node_iface = {
	.get_type = direct_get_type,
	.get_schema = direct_get_schema,
	.set_null = direct_set_null,
	.set_boolean = direct_set_boolean,
	.set_int = direct_set_int,
	.set_long = direct_set_long,
	.set_enum = direct_set_enum,
	.set_float = direct_set_float,
	.set_double = direct_set_double,
	.give_string_len = direct_give_string_len,
	.give_bytes = direct_give_bytes,
	.give_fixed = direct_give_fixed,
	.set_branch = direct_set_branch,
};

/* a field of fields: its node, or none (Avro C skips it: its size is not known) */
static int
field_value(DirectRecord *dr, DirectNode *fields, int nfields, size_t index, avro_value_t *child)
{
	if (index >= (size_t) nfields)
	{
		avro_set_error("Field index %d out of range", (int) index);
		return EINVAL;
	}
	if (fields[index].skipped)
	{
		child->iface = NULL;
		child->self = NULL;
		dr->size_known = false;
		return 0;
	}
	node_as_value(&fields[index], child);
	return 0;
}

/* a nested record: the reader asks its size first, so that is when it came */
static int
direct_nested_size(const avro_value_iface_t *iface, const void *self, size_t *size)
{
	DirectNode *n = (DirectNode *) self;

	if (n->target)
		n->target->atype = n->atype;
	*size = n->nfields;
	return 0;
}

static int
direct_nested_field(const avro_value_iface_t *iface, const void *self, size_t index,
					avro_value_t *child, const char **name)
{
	DirectNode *n = (DirectNode *) self;

	if (name)
		*name = NULL;
	return field_value(n->rec, n->fields, n->nfields, index, child);
}

static const avro_value_iface_t direct_nested_iface = {
	.get_type = direct_get_type,
	.get_schema = direct_get_schema,
	.get_size = direct_nested_size,
	.get_by_index = direct_nested_field,
};

/* Free what the last record handed over (its columns were converted, or failed). */
static int
direct_reset(const avro_value_iface_t *iface, void *self)
{
	DirectRecord *dr = self;

	for (int i = 0; i < dr->nheld; i++)
	{
		avro_wrapped_buffer_free(&dr->held[i]->buf);
		dr->held[i]->has_buf = false;
	}
	dr->nheld = 0;
	dr->size = 0;
	dr->size_known = true;
	return 0;
}

static avro_type_t
direct_record_type(const avro_value_iface_t *iface, const void *self)
{
	return AVRO_RECORD;
}

static avro_schema_t
direct_record_schema(const avro_value_iface_t *iface, const void *self)
{
	return ((const DirectRecord *) self)->schema;
}

static int
direct_record_size(const avro_value_iface_t *iface, const void *self, size_t *size)
{
	*size = ((const DirectRecord *) self)->nfields;
	return 0;
}

static int
direct_record_field(const avro_value_iface_t *iface, const void *self, size_t index,
					avro_value_t *child, const char **name)
{
	DirectRecord *dr = (DirectRecord *) self;

	if (name)
		*name = NULL;
	return field_value(dr, dr->fields, dr->nfields, index, child);
}

static const avro_value_iface_t direct_record_iface = {
	.reset = direct_reset,
	.get_type = direct_record_type,
	.get_schema = direct_record_schema,
	.get_size = direct_record_size,
	.get_by_index = direct_record_field,
};

static avro_schema_t
resolved(avro_schema_t s)
{
	while (is_avro_link(s))
		s = avro_schema_link_target(s);
	return s;
}

static bool
direct_primitive(avro_type_t t)
{
	switch (t)
	{
		case AVRO_NULL:
		case AVRO_BOOLEAN:
		case AVRO_INT32:
		case AVRO_INT64:
		case AVRO_FLOAT:
		case AVRO_DOUBLE:
		case AVRO_STRING:
		case AVRO_BYTES:
		case AVRO_FIXED:
		case AVRO_ENUM:
			return true;
		default:
			return false;
	}
}

static bool direct_fields(DirectRecord *dr, DirectNode *n, AvroType *t, DirectValue **field_targets,
						  bool keep_size);

/*
 * A field's node (or a branch's), filling target; false: the field is not
 * of the direct kind.  Records (nested, or a union's branch) only with
 * records_ok: their fields' nodes fill field_targets (per field, or NULL).
 */
static bool
direct_node(DirectRecord *dr, DirectNode *n, AvroType *t, avro_schema_t s, DirectValue *target,
			bool records_ok, DirectValue **field_targets)
{
	n->rec = dr;
	n->type = t->type;
	n->schema = resolved(s);
	n->atype = t;
	n->target = target;
	if (avro_typeof(n->schema) != t->type)
		return false;
	if (t->type == AVRO_RECORD)
		return records_ok && direct_fields(dr, n, t, field_targets, field_targets != NULL);
	if (t->type != AVRO_UNION)
		return direct_primitive(t->type);
	n->nbranches = t->nbranches;
	n->branches = palloc0(sizeof(DirectNode) * Max(t->nbranches, 1));
	for (int b = 0; b < t->nbranches; b++)
	{
		if (t->branches[b]->type == AVRO_UNION ||
			!direct_node(dr, &n->branches[b], t->branches[b],
						 avro_schema_union_branch(n->schema, b), target, records_ok, field_targets))
			return false;
	}
	return true;
}

/*
 * A record node's fields: those with a target must be read directly (and
 * be primitives); the others are read for their size when they can be,
 * else skipped (then, without keep_size, the record is not of the direct
 * kind: a nested record no column takes, an event's source, is worth
 * reading only whole; a record the row comes from may skip fields).
 */
static bool
direct_fields(DirectRecord *dr, DirectNode *n, AvroType *t, DirectValue **field_targets,
			  bool keep_size)
{
	if (avro_schema_record_size(n->schema) != (size_t) t->nfields)
		return false;
	n->nfields = t->nfields;
	n->fields = palloc0(sizeof(DirectNode) * Max(t->nfields, 1));
	for (int f = 0; f < t->nfields; f++)
	{
		DirectNode *fn = &n->fields[f];
		DirectValue *target = field_targets ? field_targets[f] : NULL;

		if (direct_node(dr, fn, t->field_types[f], avro_schema_record_field_get_by_index(n->schema, f),
						target, target == NULL, NULL))
			continue;
		if (target != NULL || !keep_size)
			return false;
		memset(fn, 0, sizeof(DirectNode));
		fn->skipped = true;
	}
	return true;
}

/*
 * The targets of a record's fields: per field of record, the DirectValue
 * of the column that takes it (side: after 0, before 1), or NULL; false: a
 * column takes a field as JSON or an array.
 */
static bool
side_targets(StmAvroParser *ap, DirectRecord *dr, AvroRow *row, int side, DirectValue ***targets)
{
	AvroType   *rt = row->record;

	*targets = palloc0(sizeof(DirectValue *) * Max(rt->nfields, 1));
	for (int i = 0; i < ap->p->nrow; i++)
	{
		if (row->field[i] < 0)
			continue;
		if (ap->cols[i].t->wants_json || ap->cols[i].elem)
			return false;
		(*targets)[row->field[i]] = side ? DV_BEFORE(dr, i) : DV_AFTER(dr, i);
	}
	return true;
}

/*
 * The direct reading of a plan's records, in the parser's memory; NULL:
 * they are read the generic way (a whole value, a field a column takes
 * that is not a primitive, a json column, an event whose before or after
 * is not a record or a union of null and one).
 */
static DirectRecord *
direct_plan(StmAvroParser *ap, AvroPlan *plan)
{
	StmParser  *p = ap->p;
	bool		event = p->envelope == STM_ENVELOPE_DEBEZIUM;
	AvroType   *rt = event ? plan->schema->type : plan->row.record;
	DirectRecord *dr;
	DirectNode	top = {0};
	DirectValue **targets;

	if (plan->error || plan->whole || rt == NULL || rt->type != AVRO_RECORD)
		return NULL;
	top.schema = resolved(plan->schema->schema);
	if (avro_typeof(top.schema) != AVRO_RECORD)
		return NULL;
	dr = palloc0(sizeof(DirectRecord));
	dr->schema = top.schema;
	dr->nrow = p->nrow;
	dr->event = event;
	dr->values = palloc0(sizeof(DirectValue) * DV_COUNT(p->nrow));
	dr->held = palloc0(sizeof(DirectValue *) * DV_COUNT(p->nrow));
	if (!event)
	{
		if (!side_targets(ap, dr, &plan->row, 0, &targets))
			return NULL;
		if (!direct_fields(dr, &top, rt, targets, true))
			return NULL;
	}
	else
	{
		/* the event's fields: before and after (their rows' columns), op, ts_ms; the others for their size */
		top.nfields = rt->nfields;
		top.fields = palloc0(sizeof(DirectNode) * Max(rt->nfields, 1));
		if (avro_schema_record_size(top.schema) != (size_t) rt->nfields)
			return NULL;
		for (int f = 0; f < rt->nfields; f++)
		{
			DirectNode *fn = &top.fields[f];
			avro_schema_t fs = avro_schema_record_field_get_by_index(top.schema, f);
			int			side = f == plan->f_after ? 0 : f == plan->f_before ? 1 : -1;
			bool		ok;

			if (side >= 0)
			{
				AvroRow    *row = side ? &plan->before : &plan->row;
				AvroType   *ft = rt->field_types[f];

				/* the side: a record of the row's, or a union of it and null */
				if (row->record == NULL || !side_targets(ap, dr, row, side, &targets))
					return NULL;
				for (int b = 0; ft->type == AVRO_UNION && b < ft->nbranches; b++)
					if (ft->branches[b]->type != AVRO_NULL && ft->branches[b] != row->record)
						return NULL;
				if (ft->type != AVRO_UNION && ft != row->record)
					return NULL;
				ok = direct_node(dr, fn, ft, fs, DV_SIDE(dr, side), true, targets);
			}
			else if (f == plan->f_op || f == plan->f_ts)
				ok = direct_node(dr, fn, rt->field_types[f], fs, f == plan->f_op ? DV_OP(dr) : DV_TS(dr),
								 false, NULL);
			else
			{
				ok = direct_node(dr, fn, rt->field_types[f], fs, NULL, true, NULL);
				if (!ok)
				{
					memset(fn, 0, sizeof(DirectNode));
					fn->skipped = true;
					ok = true;
				}
			}
			if (!ok)
				return NULL;
		}
	}
	dr->nfields = top.nfields;
	dr->fields = top.fields;
	return dr;
}

/*
 * A record read directly into the row's columns (an event's: its side's,
 * and cdc_op, cdc_ts): false (nothing converted) when it must be read the
 * generic way, which says what is wrong with it, if anything.
 */
static bool
direct_parse(StmAvroParser *ap, AvroPlan *plan, const char *data, int len,
			 Datum *values, bool *nulls)
{
	StmParser  *p = ap->p;
	DirectRecord *dr = plan->direct;
	AvroRow    *row = &plan->row;
	avro_value_t value;
	int			side = 0;

	value.iface = (avro_value_iface_t *) &direct_record_iface;
	value.self = dr;
	avro_reader_memory_set_source(ap->in, data, len);
	/* read it all, or (a skipped field, a longer encoding) nothing is left */
	if (avro_value_read(ap->in, &value) != 0 ||
		((!dr->size_known || dr->size != (size_t) len) && avro_skip(ap->in, 1) == 0))
	{
		(void) direct_reset(NULL, dr);
		return false;
	}
	if (dr->event)
	{
		DirectValue *op = DV_OP(dr);
		DirectValue *ts = DV_TS(dr);

		/* no op, or no side for it: the generic reading says so */
		if (op->atype == NULL || op->atype->type != AVRO_STRING)
		{
			(void) direct_reset(NULL, dr);
			return false;
		}
		p->cdc_op = stm_debezium_op(op->v.data, (int) op->v.size - 1);
		side = p->cdc_op == 'd' ? 1 : 0;
		if (DV_SIDE(dr, side)->atype == NULL || DV_SIDE(dr, side)->atype->type != AVRO_RECORD)
		{
			(void) direct_reset(NULL, dr);
			return false;
		}
		p->has_cdc_ts = false;
		if (plan->f_ts >= 0 && ts->atype->type != AVRO_NULL)
		{
			if (ap->ts_col == NULL)
				make_ts_col(ap);
			p->cdc_ts_ms = DatumGetInt64(scalar_to_column(ap->ts_col, ts->atype, &ts->v));
			p->has_cdc_ts = true;
		}
		if (side)
			row = &plan->before;
	}
	for (int i = 0; i < p->nrow; i++)
	{
		DirectValue *dv = side ? DV_BEFORE(dr, i) : DV_AFTER(dr, i);

		if (row->field[i] < 0)
			values[i] = default_value(&ap->cols[i], row->dflt[i], row->dflt_string[i], &nulls[i]);
		else if ((nulls[i] = dv->atype->type == AVRO_NULL))
			values[i] = (Datum) 0;
		else
			values[i] = scalar_to_column(&ap->cols[i], dv->atype, &dv->v);
	}
	(void) direct_reset(NULL, dr);
	return true;
}

#ifdef STM_FAULT_INJECTION
/* Test builds: the generic reading of the record must give the same row (and cdc_op, cdc_ts). */
static void
check_direct(StmAvroParser *ap, AvroPlan *plan, const char *data, int len,
			 const Datum *values, const bool *nulls)
{
	StmParser  *p = ap->p;
	avro_value_t *v = decode(ap, plan->schema, data, len);
	avro_value_t rec = *v;
	AvroRow    *row = &plan->row;

	if (plan->direct->event)
	{
		char		op = p->cdc_op;
		bool		has_ts = p->has_cdc_ts;
		int64		ts = p->cdc_ts_ms;

		row = event_row(ap, plan, v, &rec);
		if (row == NULL || op != p->cdc_op || has_ts != p->has_cdc_ts || (has_ts && ts != p->cdc_ts_ms))
			elog(ERROR, "Avro change event of schema %d: the direct reading of its op or ts_ms differs from the generic one",
				 plan->id);
	}
	for (int i = 0; i < p->nrow; i++)
	{
		int			f = row->field[i];
		bool		isnull;
		Datum		d;
		int16		typlen;
		bool		typbyval;

		if (f < 0)
			continue;
		{
			avro_value_t fv;

			avro_value_get_by_index(&rec, f, &fv, NULL);
			d = to_column(&ap->cols[i], fv, row->record->field_types[f], &isnull);
		}
		get_typlenbyval(ap->cols[i].t->type, &typlen, &typbyval);
		if (isnull != nulls[i] || (!isnull && !datumIsEqual(d, values[i], typbyval, typlen)))
			elog(ERROR, "Avro record of schema %d: the direct reading of column %d differs from the generic one",
				 plan->id, i + 1);
	}
}
#endif

/* One record (a Kafka message's value) into the parser's row columns (and cdc_op, cdc_ts). */
void
stm_avro_parse(StmAvroParser *ap, const char *data, int len, Datum *values, bool *nulls)
{
	StmParser  *p = ap->p;
	AvroPlan   *plan = plan_of(ap, wire_id(data, len));
	avro_value_t *v;
	avro_value_t rec;
	AvroRow    *row = &plan->row;

	if (plan->error)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("Avro record of schema %d cannot be read", plan->id),
				 errdetail("%s", plan->error)));
	if (!plan->direct_planned)
	{
		MemoryContext oldcxt = MemoryContextSwitchTo(ap->cxt);

		plan->direct = direct_plan(ap, plan);
		plan->direct_planned = true;
		MemoryContextSwitchTo(oldcxt);
	}
	if (plan->direct && direct_parse(ap, plan, data + 5, len - 5, values, nulls))
	{
#ifdef STM_FAULT_INJECTION
		check_direct(ap, plan, data + 5, len - 5, values, nulls);
#endif
		return;
	}
	v = decode(ap, plan->schema, data + 5, len - 5);
	if (plan->whole)
	{
		values[0] = to_column(&ap->cols[0], *v, plan->schema->type, &nulls[0]);
		return;
	}
	rec = *v;
	if (p->envelope == STM_ENVELOPE_DEBEZIUM)
	{
		row = event_row(ap, plan, v, &rec);
		if (row == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_TEXT_REPRESENTATION),
					 errmsg("Debezium change event with op \"%c\" has no %s", p->cdc_op,
							p->cdc_op == 'd' ? "before" : "after")));
	}
	for (int i = 0; i < p->nrow; i++)
	{
		int			f = row->field[i];
		avro_value_t fv;

		if (f < 0)
		{
			values[i] = default_value(&ap->cols[i], row->dflt[i], row->dflt_string[i], &nulls[i]);
			continue;
		}
		avro_value_get_by_index(&rec, f, &fv, NULL);
		values[i] = to_column(&ap->cols[i], fv, row->record->field_types[f], &nulls[i]);
	}
}

/* A record (a key) in the wire format as jsonb (kafka_key_avro). */
Datum
stm_avro_parse_jsonb(StmAvroParser *ap, const char *data, int len)
{
	int32		id = wire_id(data, len);
	AvroSchema *s = get_schema(ap->reader, id);
	StringInfoData buf;
	avro_value_t *v;

	if (!s->known)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("unknown schema id %d in Avro key", id),
				 errdetail("The schema registry at %s has no schema with this id.",
						   stm_registry_url(ap->reader->registry))));
	if (s->error)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("Avro key of schema %d cannot be read", id),
				 errdetail("%s", s->error)));
	v = decode(ap, s, data + 5, len - 5);
	initStringInfo(&buf);
	append_json(&buf, v, s->type);
	return DirectFunctionCall1(jsonb_in, CStringGetDatum(buf.data));
}

/* ---- create time ----------------------------------------------------------- */

/* The PostgreSQL type a field's values have as they are (typmod: numeric's). */
static Oid
natural_type(AvroType *t, int32 *typmod)
{
	*typmod = -1;
	if (t->type == AVRO_UNION)
	{
		AvroType   *b = nullable_branch(t);

		if (b == NULL)
		{
			/* several types: their JSON; only null: any */
			for (int i = 0; i < t->nbranches; i++)
				if (t->branches[i]->type != AVRO_NULL)
					return JSONBOID;
			return TEXTOID;
		}
		t = b;
	}
	switch (t->type)
	{
		case AVRO_BOOLEAN:
			return BOOLOID;
		case AVRO_INT32:
			return t->logical == STM_AVRO_DATE ? DATEOID :
				t->logical == STM_AVRO_TIME_MILLIS ? TIMEOID : INT4OID;
		case AVRO_INT64:
			switch (t->logical)
			{
				case STM_AVRO_TIME_MICROS:
				case STM_AVRO_TIME_NANOS:
					return TIMEOID;
				case STM_AVRO_TIMESTAMP_MILLIS:
				case STM_AVRO_TIMESTAMP_MICROS:
				case STM_AVRO_TIMESTAMP_NANOS:
					return TIMESTAMPTZOID;
				case STM_AVRO_LOCAL_TIMESTAMP_MILLIS:
				case STM_AVRO_LOCAL_TIMESTAMP_MICROS:
				case STM_AVRO_LOCAL_TIMESTAMP_NANOS:
					return TIMESTAMPOID;
				case STM_AVRO_DATE:
					return DATEOID;
				default:
					return INT8OID;
			}
		case AVRO_FLOAT:
			return FLOAT4OID;
		case AVRO_DOUBLE:
			return FLOAT8OID;
		case AVRO_STRING:
			return t->logical == STM_AVRO_UUID ? UUIDOID : TEXTOID;
		case AVRO_BYTES:
		case AVRO_FIXED:
			if (t->logical != STM_AVRO_DECIMAL)
				return BYTEAOID;
			if (t->precision <= NUMERIC_MAX_PRECISION)
				*typmod = ((t->precision << 16) | t->scale) + VARHDRSZ;
			return NUMERICOID;
		case AVRO_ENUM:
		case AVRO_NULL:
			return TEXTOID;
		default:
			return JSONBOID;
	}
}

/* A type of the schema, for messages: long (timestamp-micros), union [null, string], record orders. */
static char *
describe_type(AvroType *t)
{
	static const char *const names[] = {"string", "bytes", "int", "long", "float", "double",
	"boolean", "null", "record", "enum", "fixed", "map", "array", "union", "link"};
	int32		typmod;
	Oid			natural;

	if (t->type == AVRO_UNION)
	{
		StringInfoData buf;

		initStringInfo(&buf);
		appendStringInfoString(&buf, "union [");
		for (int i = 0; i < t->nbranches; i++)
			appendStringInfo(&buf, "%s%s", i ? ", " : "", describe_type(t->branches[i]));
		appendStringInfoChar(&buf, ']');
		return buf.data;
	}
	if (t->name)
		return psprintf("%s %s", names[t->type], t->name);
	natural = natural_type(t, &typmod);
	if (t->logical != STM_AVRO_PLAIN)
		return psprintf("%s (%s)", names[t->type], format_type_with_typemod(natural, typmod));
	return pstrdup(names[t->type]);
}

/* The latest schema of subject <topic>-value, described; raises unless there is one. */
static AvroType *
latest_value_schema(Jsonb *options, const char *topic, StmRegistrySchema *rs, char **subject)
{
	StmRegistry *reg = stm_registry_open(stm_option_jsonb(options, "schema_registry"),
										 "create_kafka_source");

	*subject = psprintf("%s-value", topic);
	*rs = stm_registry_latest(reg, *subject);
	if (!rs->found)
		return NULL;
	return describe_schema(rs->text, rs->id);
}

/* The row's record of a source's schema (the value, or an event's after), or raises. */
static AvroType *
source_row(AvroType *t, bool debezium, const char *subject, int32 id)
{
	int			a, b, c, d;
	AvroType   *row = row_record(t, debezium, &a, &b, &c, &d);

	if (row == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the latest schema of subject \"%s\" (id %d) is not a Debezium change event",
						subject, id),
				 errdetail("A change event is a record of before, after and op.")));
	return row;
}

/*
 * create_kafka_source with format avro and no columns: the columns are the
 * fields of the latest schema of subject <topic>-value (a change event's
 * after), with the types their values have; the schema's id is kept
 * (reader_schema_id), for its fields' defaults.
 */
Jsonb *
stm_avro_columns_from_registry(Jsonb *options, const char *topic)
{
	bool		debezium = stm_option_given(options, "envelope");
	StmRegistrySchema rs;
	char	   *subject;
	AvroType   *t;
	AvroType   *row;
	StringInfoData cols;

	if (topic == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("format \"avro\" without columns needs exactly one topic"),
				 errdetail("The columns are taken from the latest schema of the subject <topic>-value."),
				 errhint("Give columns, or one topic in topics.")));
	t = latest_value_schema(options, topic, &rs, &subject);
	if (t == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("the schema registry has no subject \"%s\"", subject),
				 errdetail("Without columns, the columns are taken from the latest schema of the subject <topic>-value."),
				 errhint("Register the topic's schema first, or give columns.")));
	row = source_row(t, debezium, subject, rs.id);
	initStringInfo(&cols);
	if (row->type != AVRO_RECORD)
	{
		int32		typmod;
		Oid			type = natural_type(row, &typmod);

		appendStringInfo(&cols, "value %s", format_type_with_typemod(type, typmod));
	}
	for (int i = 0; row->type == AVRO_RECORD && i < row->nfields; i++)
	{
		int32		typmod;
		Oid			type = natural_type(row->field_types[i], &typmod);

		appendStringInfo(&cols, "%s%s %s", i ? ", " : "", quote_identifier(row->field_names[i]),
						 format_type_extended(type, typmod,
											  FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY));
	}
	if (cols.len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the latest schema of subject \"%s\" (id %d) has no fields", subject, rs.id)));
	options = stm_option_set_text(options, "columns", cols.data);
	return stm_option_set_text(options, "reader_schema_id", psprintf("%d", rs.id));
}

/* Can a column of type col take the values of t (as to_column converts them)? */
static bool
can_hold(AvroType *t, Oid col)
{
	Oid			base = getBaseType(col);
	Oid			elem = get_element_type(base);
	Oid			natural;
	int32		typmod;

	if (t->type == AVRO_UNION)
	{
		for (int i = 0; i < t->nbranches; i++)
			if (!can_hold(t->branches[i], col))
				return false;
		return true;
	}
	if (t->type == AVRO_NULL || t->type == AVRO_STRING || t->type == AVRO_ENUM ||
		base == TEXTOID || base == VARCHAROID || base == BPCHAROID || base == NAMEOID ||
		base == JSONOID || base == JSONBOID)
		return true;
	if (t->type == AVRO_ARRAY && OidIsValid(elem))
		return can_hold(t->items, elem);
	natural = natural_type(t, &typmod);
	return natural == base || can_coerce_type(1, &natural, &base, COERCION_ASSIGNMENT);
}

/*
 * create_kafka_source with format avro and columns: when the subject
 * <topic>-value has a schema now, every declared column that names one of
 * its fields must be able to take the field's values.  A registry that
 * cannot be reached only gets a WARNING (the records are checked as they
 * come).
 */
void
stm_avro_check_columns(Jsonb *options, const char *topic, List *columns)
{
	MemoryContext cxt = CurrentMemoryContext;
	StmRegistrySchema rs = {0};
	char	   *subject = NULL;
	AvroType   *t = NULL;
	AvroType   *row;
	ListCell   *lc;

	if (topic == NULL)
		return;
	PG_TRY();
	{
		t = latest_value_schema(options, topic, &rs, &subject);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		if (ERRCODE_TO_CATEGORY(edata->sqlerrcode) != ERRCODE_CONNECTION_EXCEPTION)
			PG_RE_THROW();
		FlushErrorState();
		ereport(WARNING,
				(errmsg("could not check the columns against the schema registry"),
				 errdetail("%s", edata->message),
				 errhint("Records are read once the registry answers.")));
	}
	PG_END_TRY();
	if (t == NULL)
		return;
	row = source_row(t, stm_option_given(options, "envelope"), subject, rs.id);
	if (row->type != AVRO_RECORD)
		return;
	foreach(lc, columns)
	{
		StmMetaColumn *c = lfirst(lc);
		int			f = field_index(row, c->name);
		Oid			type;
		int32		typmod;
		Oid			natural;

		if (f < 0)
			continue;
		parseTypeString(c->type, &type, &typmod, false);
		if (can_hold(row->field_types[f], type))
			continue;
		natural = natural_type(row->field_types[f], &typmod);
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of type %s cannot hold field \"%s\" of type %s",
						c->name, format_type_be(type), c->name, describe_type(row->field_types[f])),
				 errdetail("The field is in the latest schema of subject \"%s\" (id %d).", subject, rs.id),
				 errhint("Declare the column as %s, or leave columns out to take them from the schema.",
						 format_type_with_typemod(natural, typmod))));
	}
}

/* ---- sinks ------------------------------------------------------------------ */

/* How an output column is written. */
typedef enum AvroOut
{
	OUT_BOOLEAN,
	OUT_INT,
	OUT_LONG,
	OUT_FLOAT,
	OUT_DOUBLE,
	OUT_STRING,					/* its text form */
	OUT_BYTES,
	OUT_DECIMAL,				/* numeric with a typmod: decimal bytes */
	OUT_TIMESTAMP,				/* timestamptz: timestamp-micros */
	OUT_LOCAL_TIMESTAMP,		/* timestamp: local-timestamp-micros */
	OUT_DATE,
	OUT_TIME					/* time-micros */
} AvroOut;

struct StmAvroWriter
{
	int			n;
	int		   *atts;
	AvroOut    *kinds;
	bool	   *smallint;		/* OUT_INT of an int2 */
	int		   *scales;
	FmgrInfo   *out_funcs;
	int32		id;
	avro_schema_t schema;
	avro_value_iface_t *iface;
	avro_value_t value;
	avro_writer_t writer;
};

static AvroOut
out_kind(Form_pg_attribute att, int *precision, int *scale)
{
	Oid			type = getBaseType(att->atttypid);

	switch (type)
	{
		case BOOLOID:
			return OUT_BOOLEAN;
		case INT2OID:
		case INT4OID:
			return OUT_INT;
		case INT8OID:
			return OUT_LONG;
		case FLOAT4OID:
			return OUT_FLOAT;
		case FLOAT8OID:
			return OUT_DOUBLE;
		case BYTEAOID:
			return OUT_BYTES;
		case TIMESTAMPTZOID:
			return OUT_TIMESTAMP;
		case TIMESTAMPOID:
			return OUT_LOCAL_TIMESTAMP;
		case DATEOID:
			return OUT_DATE;
		case TIMEOID:
			return OUT_TIME;
		case NUMERICOID:
			if (att->atttypmod >= VARHDRSZ)
			{
				*precision = ((att->atttypmod - VARHDRSZ) >> 16) & 0xffff;
				*scale = (((att->atttypmod - VARHDRSZ) & 0x7ff) ^ 1024) - 1024;
				if (*precision > 0 && *scale >= 0 && *scale <= *precision)
					return OUT_DECIMAL;
			}
			return OUT_STRING;
		default:
			return OUT_STRING;
	}
}

static bool
valid_avro_name(const char *s)
{
	if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_'))
		return false;
	for (s++; *s; s++)
		if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || *s == '_' ||
			  (*s >= '0' && *s <= '9')))
			return false;
	return true;
}

/*
 * The record schema (JSON) of output columns atts of desc (NULL: the first
 * n), each a union of null and its type: numeric with a typmod as decimal bytes of its
 * precision and scale, other numeric as string, timestamptz as
 * timestamp-micros, timestamp as local-timestamp-micros, date, time as
 * time-micros, uuid, json and jsonb and other types as string (their text
 * form).  name is the record's (made an Avro name); what names the
 * stream in errors: a column name Avro does not allow is refused.
 */
char *
stm_avro_record_schema(TupleDesc desc, int n, const int *atts, const char *name, const char *what)
{
	StringInfoData buf;
	StringInfoData rec;

	initStringInfo(&rec);
	for (const char *s = name; *s; s++)
		appendStringInfoChar(&rec, (isalnum((unsigned char) *s) && !IS_HIGHBIT_SET(*s)) || *s == '_' ? *s : '_');
	if (rec.len == 0 || (rec.data[0] >= '0' && rec.data[0] <= '9'))
		rec.data = psprintf("_%s", rec.data);
	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"type\": \"record\", \"name\": \"%s\", \"namespace\": \"streaming\", \"fields\": [",
					 rec.data);
	for (int k = 0; k < n; k++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, atts ? atts[k] : k);
		int			precision = 0;
		int			scale = 0;
		const char *type;

		if (!valid_avro_name(NameStr(att->attname)))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_NAME),
					 errmsg("column \"%s\" of %s cannot be an Avro field name", NameStr(att->attname), what),
					 errdetail("An Avro name is letters, digits and underscores, not starting with a digit."),
					 errhint("Rename the column with AS in the stream's query.")));
		switch (out_kind(att, &precision, &scale))
		{
			case OUT_BOOLEAN:
				type = "\"boolean\"";
				break;
			case OUT_INT:
				type = "\"int\"";
				break;
			case OUT_LONG:
				type = "\"long\"";
				break;
			case OUT_FLOAT:
				type = "\"float\"";
				break;
			case OUT_DOUBLE:
				type = "\"double\"";
				break;
			case OUT_BYTES:
				type = "\"bytes\"";
				break;
			case OUT_DECIMAL:
				type = psprintf("{\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": %d, \"scale\": %d}",
								precision, scale);
				break;
			case OUT_TIMESTAMP:
				type = "{\"type\": \"long\", \"logicalType\": \"timestamp-micros\"}";
				break;
			case OUT_LOCAL_TIMESTAMP:
				type = "{\"type\": \"long\", \"logicalType\": \"local-timestamp-micros\"}";
				break;
			case OUT_DATE:
				type = "{\"type\": \"int\", \"logicalType\": \"date\"}";
				break;
			case OUT_TIME:
				type = "{\"type\": \"long\", \"logicalType\": \"time-micros\"}";
				break;
			default:
				type = getBaseType(att->atttypid) == UUIDOID ?
					"{\"type\": \"string\", \"logicalType\": \"uuid\"}" : "\"string\"";
				break;
		}
		appendStringInfo(&buf, "%s{\"name\": \"%s\", \"type\": [\"null\", %s], \"default\": null}",
						 k ? ", " : "", NameStr(att->attname), type);
	}
	appendStringInfoString(&buf, "]}");
	return buf.data;
}

static void
writer_destroy_cb(void *arg)
{
	StmAvroWriter *w = arg;

	if (w->writer)
		avro_writer_free(w->writer);
	avro_value_decref(&w->value);
	avro_value_iface_decref(w->iface);
	avro_schema_decref(w->schema);
}

/*
 * A writer of output columns atts of desc (NULL: the first n) in schema
 * (stm_avro_record_schema of them), which the registry gave id; in the
 * current memory context.
 */
StmAvroWriter *
stm_avro_writer_new(TupleDesc desc, int n, const int *atts, const char *schema, int32 id)
{
	StmAvroWriter *w = palloc0(sizeof(StmAvroWriter));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));

	w->n = n;
	w->id = id;
	w->atts = palloc(sizeof(int) * Max(n, 1));
	w->kinds = palloc(sizeof(AvroOut) * Max(n, 1));
	w->smallint = palloc(sizeof(bool) * Max(n, 1));
	w->scales = palloc(sizeof(int) * Max(n, 1));
	w->out_funcs = palloc0(sizeof(FmgrInfo) * Max(n, 1));
	for (int k = 0; k < n; k++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, atts ? atts[k] : k);
		int			precision = 0;
		Oid			fn;
		bool		varlena;

		w->atts[k] = atts ? atts[k] : k;
		w->scales[k] = 0;
		w->kinds[k] = out_kind(att, &precision, &w->scales[k]);
		w->smallint[k] = getBaseType(att->atttypid) == INT2OID;
		getTypeOutputInfo(att->atttypid, &fn, &varlena);
		fmgr_info(fn, &w->out_funcs[k]);
	}
	if (avro_schema_from_json_length(schema, strlen(schema), &w->schema) != 0)
		elog(ERROR, "Avro C cannot read the sink's schema: %s", avro_strerror());
	w->iface = avro_generic_class_from_schema(w->schema);
	if (w->iface == NULL || avro_generic_value_new(w->iface, &w->value) != 0)
		elog(ERROR, "Avro C cannot make a value of the sink's schema: %s", avro_strerror());
	w->writer = avro_writer_memory("", 0);
	cb->func = writer_destroy_cb;
	cb->arg = w;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	return w;
}

/* A text in UTF-8 (Avro's strings are), NUL-terminated; *len its length. */
static char *
utf8_string(char *s, int *len)
{
	char	   *u = pg_server_to_any(s, strlen(s), PG_UTF8);

	*len = strlen(u);
	return u;
}

/* A numeric of scale as Avro's decimal: the unscaled value, two's complement, big-endian. */
static bytea *
decimal_bytes(Datum value, int scale)
{
	Numeric		num = DatumGetNumeric(value);
	char	   *digits;
	bool		negative;
	unsigned char mag[64];
	int			nmag = 0;
	bytea	   *out;
	int			len;
	bool		pad;

	if (numeric_is_nan(num) || numeric_is_inf(num))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("cannot write %s as an Avro decimal", numeric_is_nan(num) ? "NaN" : "infinity")));
	/* the unscaled integer's decimal digits */
	value = DirectFunctionCall2(numeric_mul, value,
								NumericGetDatum(int64_div_fast_to_numeric(1, -scale)));
	value = DirectFunctionCall2(numeric_round, value, Int32GetDatum(0));
	digits = DatumGetCString(DirectFunctionCall1(numeric_out, value));
	negative = digits[0] == '-';
	if (negative)
		digits++;
	/* its magnitude in base 256, least significant first: long division of the digits */
	while (digits[0] != '\0')
	{
		int			rem = 0;
		int			o = 0;

		/* the quotient is written over the digits it is made from */
		for (int i = 0; digits[i]; i++)
		{
			int			cur = rem * 10 + (digits[i] - '0');

			if (o > 0 || cur / 256 > 0)
				digits[o++] = '0' + cur / 256;
			rem = cur % 256;
		}
		digits[o] = '\0';
		if (nmag >= (int) sizeof(mag))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("numeric value too large for an Avro decimal")));
		mag[nmag++] = (unsigned char) rem;
	}
	if (nmag == 0)
		mag[nmag++] = 0;
	/* two's complement: negate the magnitude */
	if (negative)
	{
		int			carry = 1;

		for (int i = 0; i < nmag; i++)
		{
			int			b = (unsigned char) ~mag[i] + carry;

			mag[i] = (unsigned char) b;
			carry = b >> 8;
		}
	}
	/* a sign byte when the top bit says otherwise */
	pad = negative ? (mag[nmag - 1] & 0x80) == 0 : (mag[nmag - 1] & 0x80) != 0;
	len = nmag + (pad ? 1 : 0);
	out = palloc(VARHDRSZ + len);
	SET_VARSIZE(out, VARHDRSZ + len);
	for (int i = 0; i < nmag; i++)
		((unsigned char *) VARDATA(out))[len - 1 - i] = mag[i];
	if (pad)
		((unsigned char *) VARDATA(out))[0] = negative ? 0xff : 0x00;
	return out;
}

/* One output row (values of the whole output row) in the wire format. */
bytea *
stm_avro_encode(StmAvroWriter *w, const Datum *values, const bool *nulls)
{
	avro_value_t rec = w->value;
	size_t		size;
	bytea	   *out;
	unsigned char *hdr;

	for (int k = 0; k < w->n; k++)
	{
		int			a = w->atts[k];
		avro_value_t f;
		avro_value_t b;
		Datum		d = values[a];
		int			rc = 0;

		avro_value_get_by_index(&rec, k, &f, NULL);
		if (nulls[a])
		{
			avro_value_set_branch(&f, 0, &b);
			avro_value_set_null(&b);
			continue;
		}
		avro_value_set_branch(&f, 1, &b);
		switch (w->kinds[k])
		{
			case OUT_BOOLEAN:
				rc = avro_value_set_boolean(&b, DatumGetBool(d));
				break;
			case OUT_INT:
				rc = avro_value_set_int(&b, w->smallint[k] ? (int32) DatumGetInt16(d) : DatumGetInt32(d));
				break;
			case OUT_LONG:
				rc = avro_value_set_long(&b, DatumGetInt64(d));
				break;
			case OUT_FLOAT:
				rc = avro_value_set_float(&b, DatumGetFloat4(d));
				break;
			case OUT_DOUBLE:
				rc = avro_value_set_double(&b, DatumGetFloat8(d));
				break;
			case OUT_BYTES:
				{
					bytea	   *v = DatumGetByteaPP(d);

					rc = avro_value_set_bytes(&b, VARDATA_ANY(v), VARSIZE_ANY_EXHDR(v));
					break;
				}
			case OUT_DECIMAL:
				{
					bytea	   *v = decimal_bytes(d, w->scales[k]);

					rc = avro_value_set_bytes(&b, VARDATA(v), VARSIZE(v) - VARHDRSZ);
					break;
				}
			case OUT_TIMESTAMP:
			case OUT_LOCAL_TIMESTAMP:
				{
					int64		us;

					if (TIMESTAMP_NOT_FINITE(DatumGetTimestamp(d)) ||
						pg_sub_s64_overflow(DatumGetTimestamp(d), STM_UNIX_EPOCH, &us))
						ereport(ERROR,
								(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
								 errmsg("cannot write an infinite timestamp as an Avro timestamp")));
					rc = avro_value_set_long(&b, us);
					break;
				}
			case OUT_DATE:
				if (DATE_NOT_FINITE(DatumGetDateADT(d)))
					ereport(ERROR,
							(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
							 errmsg("cannot write an infinite date as an Avro date")));
				rc = avro_value_set_int(&b, DatumGetDateADT(d) - (UNIX_EPOCH_JDATE - POSTGRES_EPOCH_JDATE));
				break;
			case OUT_TIME:
				rc = avro_value_set_long(&b, DatumGetTimeADT(d));
				break;
			case OUT_STRING:
				{
					int			len;
					char	   *s = utf8_string(OutputFunctionCall(&w->out_funcs[k], d), &len);

					rc = avro_value_set_string_len(&b, s, len + 1);
					break;
				}
		}
		if (rc != 0)
			elog(ERROR, "Avro C could not set a field: %s", avro_strerror());
	}
	if (avro_value_sizeof(&rec, &size) != 0)
		elog(ERROR, "Avro C could not size a row: %s", avro_strerror());
	out = palloc(VARHDRSZ + 5 + size);
	SET_VARSIZE(out, VARHDRSZ + 5 + size);
	hdr = (unsigned char *) VARDATA(out);
	hdr[0] = 0;
	hdr[1] = (w->id >> 24) & 0xff;
	hdr[2] = (w->id >> 16) & 0xff;
	hdr[3] = (w->id >> 8) & 0xff;
	hdr[4] = w->id & 0xff;
	avro_writer_memory_set_dest(w->writer, (char *) hdr + 5, size);
	if (avro_value_write(w->writer, &rec) != 0)
		elog(ERROR, "Avro C could not write a row: %s", avro_strerror());
	return out;
}
