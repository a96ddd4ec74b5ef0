/*
 * schema_registry.c: the schema registry's REST calls (SPEC 2.1.1), over
 * libcurl: a schema by its id (GET /schemas/ids/{id}), the latest schema
 * of a subject (GET /subjects/{subject}/versions/latest), and registering
 * one (POST /subjects/{subject}/versions).  Confluent's registry and the
 * ones compatible with it (Apicurio, Redpanda, Karapace) answer these.
 *
 * Only http and https, also on redirects.  basic_auth ("user:secret") is a
 * credential (SPEC 7): it goes to libcurl and nowhere else, never into a
 * message; a URL with a user or password in it is refused, so that none
 * reaches an error through the URL.
 *
 * A registry that cannot be reached, or answers with a failure of its own,
 * raises a class 08 error: the stream waits and retries, and no record is
 * skipped or set aside because of it.  Only "not found" is an answer.
 *
 * libcurl runs in this process, synchronously, with its own timeouts and no
 * signals; its callbacks never call into PostgreSQL (the response goes into
 * a malloc'd buffer, copied after), and interrupts abort the transfer and
 * are then handled as anywhere (a worker told to stop gives its batch up).
 * The connection is kept for the next call; the client goes away with the
 * memory context it was made in.
 */
#include "postgres.h"

#include <curl/curl.h>

#include "miscadmin.h"
#include "postmaster/interrupt.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"

#include "interrupts.h"
#include "options.h"
#include "schema_registry.h"

#define REGISTRY_CONNECT_TIMEOUT_MS 5000
#define REGISTRY_TIMEOUT_MS 30000
#define REGISTRY_MAX_RESPONSE (64 * 1024 * 1024)
#define REGISTRY_CONTENT_TYPE "application/vnd.schemaregistry.v1+json"

struct StmRegistry
{
	char	   *url;			/* without a trailing slash */
	char	   *auth;			/* user:secret, or NULL: a credential */
	char	   *what;			/* who uses it, for messages */
	CURL	   *curl;
	char		errbuf[CURL_ERROR_SIZE];
};

/* A response, as libcurl hands it over: malloc'd, never palloc'd. */
typedef struct Response
{
	char	   *data;
	size_t		len;
	size_t		cap;
	bool		too_large;
} Response;

static bool curl_ready = false;

/* ---- create time ---------------------------------------------------------- */

/*
 * The url as libcurl reads it: http or https, a host, no user or password
 * (they belong in basic_auth), no query or fragment.
 */
static void
check_url(const char *url)
{
	CURLU	   *u = curl_url();
	char	   *scheme = NULL;
	char	   *host = NULL;
	char	   *user = NULL;
	char	   *password = NULL;
	char	   *query = NULL;
	char	   *fragment = NULL;
	const char *problem = NULL;

	if (u == NULL)
		elog(ERROR, "out of memory");
	if (curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
		problem = "it is not a URL";
	else
	{
		(void) curl_url_get(u, CURLUPART_SCHEME, &scheme, 0);
		(void) curl_url_get(u, CURLUPART_HOST, &host, 0);
		(void) curl_url_get(u, CURLUPART_USER, &user, 0);
		(void) curl_url_get(u, CURLUPART_PASSWORD, &password, 0);
		(void) curl_url_get(u, CURLUPART_QUERY, &query, 0);
		(void) curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0);
		if (scheme == NULL || (pg_strcasecmp(scheme, "http") != 0 && pg_strcasecmp(scheme, "https") != 0))
			problem = "only http and https URLs are allowed";
		else if (host == NULL || host[0] == '\0')
			problem = "it names no host";
		else if (user != NULL || password != NULL)
			problem = "a user or password in the URL is not allowed: give it as basic_auth";
		else if (query != NULL || fragment != NULL)
			problem = "a query or fragment in the URL is not allowed";
	}
	curl_free(scheme);
	curl_free(host);
	curl_free(user);
	curl_free(password);
	curl_free(query);
	curl_free(fragment);
	curl_url_cleanup(u);
	/* the URL is not shown: it failed to parse, and might hold a secret */
	if (problem)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid schema_registry url: %s", problem),
				 errhint("For example '{\"url\": \"http://registry:8081\"}'.")));
}

/* schema_registry: {"url": "http(s)://...", "basic_auth": "user:secret"} */
void
stm_registry_check_options(Jsonb *registry)
{
	static const char *const keys[] = {"url", "basic_auth", NULL};
	char	   *url;
	char	   *auth;

	if (registry == NULL || !JB_ROOT_IS_OBJECT(registry) || JB_ROOT_IS_SCALAR(registry))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema_registry must be a JSON object"),
				 errhint("For example '{\"url\": \"http://registry:8081\", \"basic_auth\": \"user:secret\"}'.")));
	{
		JsonbIterator *it = JsonbIteratorInit(&registry->root);
		JsonbValue	v;
		JsonbIteratorToken tok;

		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			bool		known = false;

			if (tok != WJB_KEY)
				continue;
			for (int i = 0; keys[i]; i++)
				known |= strlen(keys[i]) == v.val.string.len &&
					memcmp(keys[i], v.val.string.val, v.val.string.len) == 0;
			if (!known)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("unrecognized schema_registry key \"%.*s\"",
								v.val.string.len, v.val.string.val),
						 errhint("Valid keys are \"url\" and \"basic_auth\".")));
		}
	}
	url = stm_option_text(registry, "url");
	if (url == NULL || url[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema_registry needs a url"),
				 errhint("For example '{\"url\": \"http://registry:8081\"}'.")));
	check_url(url);
	auth = stm_option_text(registry, "basic_auth");
	if (stm_option_given(registry, "basic_auth") && (auth == NULL || strchr(auth, ':') == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("schema_registry basic_auth must be \"user:secret\"")));
}

/* ---- the client ------------------------------------------------------------ */

static void
registry_destroy_cb(void *arg)
{
	StmRegistry *reg = arg;

	if (reg->curl)
		curl_easy_cleanup(reg->curl);
	reg->curl = NULL;
}

StmRegistry *
stm_registry_open(Jsonb *registry, const char *what)
{
	StmRegistry *reg = palloc0(sizeof(StmRegistry));
	MemoryContextCallback *cb = palloc0(sizeof(MemoryContextCallback));
	char	   *url;
	size_t		len;

	/* stored options are checked again where they are used (SPEC 7) */
	stm_registry_check_options(registry);
	url = stm_option_text(registry, "url");
	len = strlen(url);
	while (len > 0 && url[len - 1] == '/')
		len--;
	reg->url = pnstrdup(url, len);
	reg->auth = stm_option_text(registry, "basic_auth");
	reg->what = pstrdup(what);
	cb->func = registry_destroy_cb;
	cb->arg = reg;
	MemoryContextRegisterResetCallback(CurrentMemoryContext, cb);
	return reg;
}

const char *
stm_registry_url(StmRegistry *reg)
{
	return reg->url;
}

/* libcurl's write callback: no PostgreSQL calls here (malloc only). */
static size_t
collect(char *ptr, size_t size, size_t nmemb, void *arg)
{
	Response   *r = arg;
	size_t		n = size * nmemb;

	if (r->len + n > REGISTRY_MAX_RESPONSE)
	{
		r->too_large = true;
		return 0;				/* aborts the transfer */
	}
	if (r->len + n + 1 > r->cap)
	{
		size_t		cap = Max(r->cap * 2, r->len + n + 1);
		char	   *data = realloc(r->data, Max(cap, 4096));

		if (data == NULL)
			return 0;
		r->data = data;
		r->cap = Max(cap, 4096);
	}
	memcpy(r->data + r->len, ptr, n);
	r->len += n;
	r->data[r->len] = '\0';
	return n;
}

/* libcurl's progress callback: an interrupt aborts the transfer. */
static int
interrupted(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
	return (InterruptPending || ShutdownRequestPending) ? 1 : 0;
}

static CURL *
handle(StmRegistry *reg)
{
	if (!curl_ready)
	{
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
			elog(ERROR, "could not initialize libcurl");
		curl_ready = true;
	}
	if (reg->curl == NULL)
	{
		reg->curl = curl_easy_init();
		if (reg->curl == NULL)
			elog(ERROR, "could not create a libcurl handle");
	}
	else
		curl_easy_reset(reg->curl);
	return reg->curl;
}

/* errdetail from the registry's error body ({"error_code": ..., "message": ...}), or none */
static int
registry_message(const char *body)
{
	Jsonb	   *j;
	char	   *msg;

	if (body == NULL || body[0] != '{')
		return 0;
	PG_TRY();
	{
		j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(body)));
	}
	PG_CATCH();
	{
		FlushErrorState();
		j = NULL;
	}
	PG_END_TRY();
	msg = j ? stm_option_text(j, "message") : NULL;
	return msg ? errdetail("The registry said: %s", msg) : 0;
}

/*
 * One request: method GET or POST (with body), to path below the registry's
 * url.  Returns the HTTP status and the response's body (palloc'd, may be
 * empty); a failure to get an answer at all raises a class 08 error.
 */
static long
request(StmRegistry *reg, const char *path, const char *body, char **response)
{
	CURL	   *curl;
	struct curl_slist *headers = NULL;
	char	   *url = psprintf("%s%s", reg->url, path);
	Response	r = {0};
	CURLcode	rc;
	long		status = 0;

	for (;;)
	{
		curl = handle(reg);
		reg->errbuf[0] = '\0';
		headers = curl_slist_append(NULL, "Accept: " REGISTRY_CONTENT_TYPE ", application/json");
		if (body)
			headers = curl_slist_append(headers, "Content-Type: " REGISTRY_CONTENT_TYPE);
		curl_easy_setopt(curl, CURLOPT_URL, url);
		curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
		curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 5L);
		curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long) REGISTRY_CONNECT_TIMEOUT_MS);
		curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long) REGISTRY_TIMEOUT_MS);
		curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, reg->errbuf);
		curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
		curl_easy_setopt(curl, CURLOPT_USERAGENT, "streaming (PostgreSQL)");
		curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, collect);
		curl_easy_setopt(curl, CURLOPT_WRITEDATA, &r);
		curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, interrupted);
		if (reg->auth)
		{
			curl_easy_setopt(curl, CURLOPT_HTTPAUTH, (long) CURLAUTH_BASIC);
			curl_easy_setopt(curl, CURLOPT_USERPWD, reg->auth);
		}
		if (body)
			curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body);
		rc = curl_easy_perform(curl);
		curl_slist_free_all(headers);
		if (rc == CURLE_OK)
			curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
		/* the password is not kept in the handle between calls */
		curl_easy_reset(curl);
		if (rc != CURLE_ABORTED_BY_CALLBACK || r.too_large)
			break;

		/*
		 * Interrupted: handled as anywhere; a worker told to stop gives its
		 * batch up (after the grace stm_check_for_interrupts allows), else
		 * the call is made again.
		 */
		free(r.data);
		memset(&r, 0, sizeof(r));
		CHECK_FOR_INTERRUPTS();
		while (ShutdownRequestPending)
		{
			stm_check_for_interrupts();
			stm_sleep(50);
		}
	}

	*response = pnstrdup(r.data ? r.data : "", r.len);
	free(r.data);
	if (r.too_large)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("the schema registry at %s answered with more than %d MB", reg->url,
						REGISTRY_MAX_RESPONSE / (1024 * 1024)),
				 errcontext("%s", reg->what)));
	if (rc != CURLE_OK)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("could not reach the schema registry at %s", reg->url),
				 errdetail("%s", reg->errbuf[0] ? reg->errbuf : curl_easy_strerror(rc)),
				 errcontext("%s", reg->what)));
	if (status == 401 || status == 403)
		ereport(ERROR,
				(errcode(ERRCODE_SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION),
				 errmsg("the schema registry at %s refused access (HTTP status %ld)", reg->url, status),
				 registry_message(*response),
				 errhint("Check the basic_auth of schema_registry."),
				 errcontext("%s", reg->what)));
	return status;
}

/* The answer of a call that must succeed (2xx) or find nothing (404). */
static Jsonb *
answer(StmRegistry *reg, long status, const char *body, const char *call)
{
	Jsonb	   *j = NULL;

	if (status == 404)
		return NULL;
	if (status < 200 || status >= 300)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("the schema registry at %s answered %s with HTTP status %ld",
						reg->url, call, status),
				 registry_message(body),
				 errcontext("%s", reg->what)));
	PG_TRY();
	{
		j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(body)));
	}
	PG_CATCH();
	{
		FlushErrorState();
		j = NULL;
	}
	PG_END_TRY();
	if (j == NULL || !JB_ROOT_IS_OBJECT(j) || JB_ROOT_IS_SCALAR(j))
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("the schema registry at %s answered %s with something that is not a JSON object",
						reg->url, call),
				 errcontext("%s", reg->what)));
	return j;
}

/* {"schema": "...", "id": n, "schemaType": ...} */
static StmRegistrySchema
schema_of(StmRegistry *reg, Jsonb *j, int32 id, const char *call)
{
	StmRegistrySchema s = {0};
	char	   *type;

	if (j == NULL)
		return s;
	s.found = true;
	s.text = stm_option_text(j, "schema");
	s.id = id >= 0 ? id : (int32) stm_option_int64(j, "id", -1);
	type = stm_option_text(j, "schemaType");
	if (s.text == NULL || s.id < 0)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("the schema registry at %s answered %s without a schema and its id",
						reg->url, call),
				 errcontext("%s", reg->what)));
	if (type && strcmp(type, "AVRO") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_BINARY_REPRESENTATION),
				 errmsg("schema %d of the schema registry at %s is a %s schema, not an Avro one",
						s.id, reg->url, type)));
	return s;
}

StmRegistrySchema
stm_registry_schema_by_id(StmRegistry *reg, int32 id)
{
	char	   *call = psprintf("GET /schemas/ids/%d", id);
	char	   *body;
	long		status = request(reg, psprintf("/schemas/ids/%d", id), NULL, &body);

	return schema_of(reg, answer(reg, status, body, call), id, call);
}

static char *
escaped(StmRegistry *reg, const char *s)
{
	char	   *e = curl_easy_escape(handle(reg), s, 0);
	char	   *copy;

	if (e == NULL)
		elog(ERROR, "out of memory");
	copy = pstrdup(e);
	curl_free(e);
	return copy;
}

StmRegistrySchema
stm_registry_latest(StmRegistry *reg, const char *subject)
{
	char	   *path = psprintf("/subjects/%s/versions/latest", escaped(reg, subject));
	char	   *call = psprintf("GET %s", path);
	char	   *body;
	long		status = request(reg, path, NULL, &body);

	return schema_of(reg, answer(reg, status, body, call), -1, call);
}

/*
 * Register schema under subject (or find it there: the registry gives a
 * schema it has its id again); returns the id.  A schema the registry
 * refuses (incompatible with the subject's, or invalid) is an error of the
 * object being made.
 */
int32
stm_registry_register(StmRegistry *reg, const char *subject, const char *schema)
{
	char	   *path = psprintf("/subjects/%s/versions", escaped(reg, subject));
	char	   *call = psprintf("POST %s", path);
	StringInfoData req;
	char	   *body;
	long		status;
	Jsonb	   *j;
	int64		id;

	initStringInfo(&req);
	appendStringInfoString(&req, "{\"schema\": ");
	escape_json(&req, schema);
	appendStringInfoChar(&req, '}');
	status = request(reg, path, req.data, &body);
	if (status == 409 || status == 422)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_OBJECT_DEFINITION),
				 errmsg("the schema registry at %s refused the schema for subject \"%s\"",
						reg->url, subject),
				 registry_message(body),
				 errhint("The subject's compatibility rules decide which schemas it takes.")));
	j = answer(reg, status == 404 ? 500 : status, body, call);
	id = stm_option_int64(j, "id", -1);
	if (id < 0 || id > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_CONNECTION_EXCEPTION),
				 errmsg("the schema registry at %s answered %s without an id", reg->url, call)));
	return (int32) id;
}
