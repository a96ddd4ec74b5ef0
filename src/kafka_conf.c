/*
 * kafka_conf.c: librdkafka configuration, for every client the extension
 * builds (the Kafka source's consumers, the Kafka sink's producer).
 *
 * kafka_options are passed to librdkafka as they are, but roles other than
 * superusers may set only the properties on an allowlist (SPEC 7: those
 * that load code, run commands or read server files never are), and every
 * stored property is checked again, for the owners, whenever a client is
 * built from it.  librdkafka's configuration is never logged: its dump
 * prints passwords as they are.
 *
 * No call into PostgreSQL from librdkafka's threads: the error callback
 * only copies a string (and runs in rd_kafka_poll on our thread), the log
 * callback drops everything.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "miscadmin.h"
#include "utils/acl.h"

#include "api.h"
#include "kafka_conf.h"
#include "options.h"

/*
 * librdkafka properties a non-superuser may set (SPEC 7: an allowlist), for
 * every client, for consumers (the Kafka source) and for producers (the
 * Kafka sink).  Sizes of the clients' queues are not among them: those are
 * derived from streaming.batch_memory, the administrator's.
 */
static const char *const user_allowed_options[] = {
	"client.id", "security.protocol", "sasl.mechanism", "sasl.mechanisms",
	"sasl.username", "sasl.password", "sasl.oauthbearer.config",
	"ssl.endpoint.identification.algorithm", "ssl.ca.pem", "ssl.certificate.pem",
	"ssl.key.pem", "ssl.key.password", "ssl.cipher.suites",
	"socket.timeout.ms", "socket.keepalive.enable", "metadata.max.age.ms",
	"topic.metadata.refresh.interval.ms", "reconnect.backoff.ms",
	"reconnect.backoff.max.ms", "client.rack", "broker.address.family",
	"api.version.request", "broker.version.fallback", "connections.max.idle.ms",
	NULL
};

static const char *const user_allowed_consumer_options[] = {
	"fetch.wait.max.ms", "fetch.min.bytes", "fetch.max.bytes",
	"fetch.message.max.bytes", "fetch.error.backoff.ms", "queued.min.messages",
	"queued.max.messages.kbytes", "receive.message.max.bytes",
	"isolation.level", "check.crcs", "group.id",
	NULL
};

static const char *const user_allowed_producer_options[] = {
	"linger.ms", "queue.buffering.max.ms", "batch.num.messages", "batch.size",
	"compression.type", "compression.codec", "compression.level",
	"partitioner", "sticky.partitioning.linger.ms", "message.max.bytes",
	"request.timeout.ms", "retry.backoff.ms",
	NULL
};

static void
kafka_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	strlcpy((char *) opaque, reason, STM_KAFKA_ERROR_LEN);
}

static void
kafka_log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	/* librdkafka's threads must not call elog; errors reach error_cb */
}

static bool
listed(const char *const *list, const char *key)
{
	for (int i = 0; list[i]; i++)
		if (strcmp(list[i], key) == 0)
			return true;
	return false;
}

/* True when role may set librdkafka property key on a client of that kind. */
bool
stm_kafka_option_allowed(const char *key, Oid role, StmKafkaClient client)
{
	if (superuser_arg(role))
		return true;
	return listed(user_allowed_options, key) ||
		listed(client == STM_KAFKA_PRODUCER ? user_allowed_producer_options :
			   user_allowed_consumer_options, key);
}

/*
 * Validate one kafka_options entry for the role that sets it: librdkafka
 * must know it, and roles other than superusers may only set properties on
 * the allowlist.
 */
void
stm_kafka_check_option(const char *key, const char *value, Oid role, StmKafkaClient client)
{
	rd_kafka_conf_t *conf;
	char		errstr[512];
	rd_kafka_conf_res_t res;

	if (strcmp(key, "bootstrap.servers") == 0 || strcmp(key, "metadata.broker.list") == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kafka_options must not set \"%s\"", key),
				 errhint("Give the brokers in the bootstrap_servers argument.")));
	if (!stm_kafka_option_allowed(key, role, client) &&
		stm_kafka_option_allowed(key, role, client == STM_KAFKA_PRODUCER ? STM_KAFKA_CONSUMER : STM_KAFKA_PRODUCER))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the Kafka client property \"%s\" is for %s, not %s", key,
						client == STM_KAFKA_PRODUCER ? "consumers" : "producers",
						client == STM_KAFKA_PRODUCER ? "producers" : "consumers"),
				 errhint("A Kafka source's kafka_options configure a consumer, a Kafka sink's a producer.")));
	if (!stm_kafka_option_allowed(key, role, client))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("only superusers may set the Kafka client property \"%s\"", key),
				 errdetail("Properties that load code, run commands or read server files are reserved to superusers.")));
	conf = rd_kafka_conf_new();
	res = rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr));
	rd_kafka_conf_destroy(conf);
	if (res != RD_KAFKA_CONF_OK)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid kafka_options entry \"%s\"", key),
				 errdetail("%s", errstr)));
}

/*
 * The kafka_options argument of a create function (in its options): a JSON
 * object of scalars, each entry checked by check_key first (NULL: none; the
 * sink's properties it sets itself) and then for role as
 * stm_kafka_check_option.
 */
void
stm_kafka_check_options(Jsonb *options, Oid role, StmKafkaClient client,
						void (*check_key) (const char *key))
{
	ListCell   *lc;

	if (!stm_arg_check_sql("SELECT jsonb_typeof($1) = 'object' AND NOT EXISTS ("
						   "SELECT 1 FROM jsonb_each($1) t WHERE jsonb_typeof(t.value) IN ('object', 'array', 'null'))",
						   JSONBOID, JsonbPGetDatum(stm_option_jsonb(options, "kafka_options"))))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("kafka_options must be a JSON object of strings, numbers or booleans"),
				 errhint(client == STM_KAFKA_PRODUCER ? "For example '{\"compression.type\": \"lz4\"}'." :
						 "For example '{\"security.protocol\": \"SASL_SSL\"}'.")));
	foreach(lc, stm_option_pairs(options, "kafka_options"))
	{
		StmOptionPair *pair = lfirst(lc);

		if (check_key)
			check_key(pair->key);
		stm_kafka_check_option(pair->key, pair->value, role, client);
	}
}

/*
 * A stored property is checked again whenever a client is built from it
 * (SPEC 7): a row changed behind the functions' back (by a superuser, by a
 * restore) cannot smuggle a property in.  Both the owner of what holds the
 * options (the source or sink, kind and name), who set them, and
 * other_owner (the stream's, whose stream runs the client; InvalidOid:
 * none) must be allowed to set each.  Values are not shown: they may be
 * secrets.
 */
void
stm_kafka_recheck_options(const char *kind, const char *name, List *pairs, Oid owner,
						  Oid other_owner, StmKafkaClient client)
{
	Oid			roles[2] = {owner, other_owner};
	ListCell   *lc;

	foreach(lc, pairs)
	{
		StmOptionPair *p = lfirst(lc);

		for (int i = 0; i < 2; i++)
			if (OidIsValid(roles[i]) && !stm_kafka_option_allowed(p->key, roles[i], client))
				ereport(ERROR,
						(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
						 errmsg("Kafka client property \"%s\" of %s \"%s\" is reserved to superusers",
								p->key, kind, name),
						 errdetail("Role \"%s\" may not set it; the property was not passed to the Kafka client.",
								   GetUserNameFromId(roles[i], false)),
						 errhint("Drop the %s and create it again without the property, or let a superuser own it.",
								 kind)));
	}
}

/* Set a property; an error destroys conf (it is not referenced anywhere else yet). */
void
stm_kafka_conf_set(rd_kafka_conf_t *conf, const char *key, const char *value)
{
	char		errstr[512];

	if (rd_kafka_conf_set(conf, key, value, errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
	{
		rd_kafka_conf_destroy(conf);
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("invalid Kafka client property \"%s\"", key),
				 errdetail("%s", errstr)));
	}
}

/*
 * A new configuration for bootstrap, whose errors go to error_buf
 * (STM_KAFKA_ERROR_LEN bytes) and whose log goes nowhere.
 */
rd_kafka_conf_t *
stm_kafka_conf_new(const char *bootstrap, char *error_buf)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	stm_kafka_conf_set(conf, "bootstrap.servers", bootstrap);
	stm_kafka_conf_set(conf, "client.id", "streaming");
	rd_kafka_conf_set_opaque(conf, error_buf);
	rd_kafka_conf_set_error_cb(conf, kafka_error_cb);
	rd_kafka_conf_set_log_cb(conf, kafka_log_cb);
	return conf;
}

/* When a wait of timeout_ms that starts now ends. */
TimestampTz
stm_kafka_deadline(int timeout_ms)
{
	return TimestampTzPlusMilliseconds(GetCurrentTimestamp(), timeout_ms);
}

/*
 * The timeout for the next slice of a wait: what is left until the
 * deadline, at most STM_KAFKA_SLICE_MS; 0 once it has passed.
 */
int
stm_kafka_slice(TimestampTz deadline)
{
	long		secs;
	int			usecs;

	TimestampDifference(GetCurrentTimestamp(), deadline, &secs, &usecs);
	if (secs >= STM_KAFKA_SLICE_MS / 1000 + 1)
		return STM_KAFKA_SLICE_MS;
	return (int) Min((int64) secs * 1000 + usecs / 1000, STM_KAFKA_SLICE_MS);
}
