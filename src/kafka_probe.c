/*
 * kafka_probe.c: create_kafka_source and create_kafka_sink try their
 * brokers once (the routines' probe).
 *
 * One client, configured as the batches' clients are (kafka_conf.c: the
 * stored kafka_options, credentials included; the configuration is never
 * logged), asks for the cluster's metadata, of every topic (asking for one
 * topic makes some brokers, and the mock, create it), for a few seconds at
 * most.  What cannot be reached or does not exist is a WARNING that says
 * which and why: the source or sink is created anyway, since brokers may be
 * down for a while and topics may be created later.
 *
 * librdkafka reports why a broker cannot be reached through the error
 * callback, served by rd_kafka_poll on this thread: name resolution,
 * refused connections, TLS and SASL failures, and "all brokers are down"
 * once each has failed, which ends the wait early.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "miscadmin.h"
#include "regex/regex.h"
#include "utils/builtins.h"

#include "guc.h"
#include "kafka_conf.h"
#include "kafka_probe.h"
#include "options.h"

/* the longest wait: streaming.kafka_timeout, but no more than this */
#define PROBE_TIMEOUT_MS 3000
/* a metadata request waits this long for a usable broker at a time */
#define PROBE_SLICE_MS 50
#define PROBE_MAX_BROKERS 16

/* The first error of each broker, as the error callback reported them. */
typedef struct ProbeErrors
{
	bool		all_down;
	int			n;
	struct
	{
		char		broker[256];	/* librdkafka's name: host:port */
		int			err;
		char		reason[STM_KAFKA_ERROR_LEN];
	}			e[PROBE_MAX_BROKERS];
} ProbeErrors;

/* A topic of the cluster's metadata. */
typedef struct ProbeTopic
{
	char	   *name;
	int			err;
	int			npartitions;
	int32	   *partitions;		/* their ids */
} ProbeTopic;

static void
probe_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	ProbeErrors *pe = opaque;
	const char *proto = strstr(reason, "://");
	const char *slash;
	const char *colon = strstr(reason, ": ");
	size_t		len;

	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
	{
		pe->all_down = true;
		return;
	}
	/* "[sasl_ssl://]host:port/bootstrap: Connect to ... failed: ..." */
	if (proto && (colon == NULL || proto < colon))
		reason = proto + 3;
	slash = strchr(reason, '/');
	colon = strstr(reason, ": ");
	len = slash && (colon == NULL || slash < colon) ? slash - reason : 0;
	for (int i = 0; i < pe->n; i++)
		if (strlen(pe->e[i].broker) == len && strncmp(pe->e[i].broker, reason, len) == 0)
			return;				/* its first error says why */
	if (pe->n == PROBE_MAX_BROKERS || len >= sizeof(pe->e[0].broker))
		return;
	memcpy(pe->e[pe->n].broker, reason, len);
	pe->e[pe->n].broker[len] = '\0';
	pe->e[pe->n].err = err;
	strlcpy(pe->e[pe->n].reason, colon ? colon + 2 : reason, STM_KAFKA_ERROR_LEN);
	pe->n++;
}

/* Why a broker could not be reached, in a few words, from its first error. */
static char *
why_unreachable(int err, const char *reason)
{
	char	   *text = pstrdup(reason);
	char	   *after = strstr(text, " (after ");

	/* librdkafka's timings and counts vary from run to run */
	if (after)
		*after = '\0';
	if (err == RD_KAFKA_RESP_ERR__RESOLVE)
		return "host name could not be resolved";
	if (strstr(text, "Connection refused"))
		return "connection refused";
	if (err == RD_KAFKA_RESP_ERR__AUTHENTICATION)
		return psprintf("authentication failed (%s)", text);
	if (err == RD_KAFKA_RESP_ERR__SSL)
		return psprintf("TLS failed (%s)", text);
	return text;
}

/*
 * "b1:9092: why; b2:9092: why", in the order of bootstrap_servers, for the
 * brokers no answer came from.
 */
static char *
unreachable_list(const char *bootstrap, ProbeErrors *pe, int timeout_ms)
{
	StringInfoData buf;
	bool	   *told = palloc0(sizeof(bool) * Max(pe->n, 1));
	char	   *list = pstrdup(bootstrap);
	char	   *save = NULL;

	initStringInfo(&buf);
	for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
	{
		char	   *entry = tok;
		char	   *proto = strstr(entry, "://");
		char	   *with_port;
		int			found = -1;

		while (*entry == ' ' || *entry == '\t')
			entry++;
		if (proto)
			entry = proto + 3;
		for (char *end = entry + strlen(entry); end > entry && (end[-1] == ' ' || end[-1] == '\t'); end--)
			end[-1] = '\0';
		if (*entry == '\0')
			continue;
		with_port = strchr(entry, ':') ? entry : psprintf("%s:9092", entry);
		for (int i = 0; i < pe->n && found < 0; i++)
			if (!told[i] && strcmp(pe->e[i].broker, with_port) == 0)
				found = i;
		appendStringInfo(&buf, "%s%s: ", buf.len > 0 ? "; " : "", with_port);
		if (found >= 0)
		{
			told[found] = true;
			appendStringInfoString(&buf, why_unreachable(pe->e[found].err, pe->e[found].reason));
		}
		else if (pe->all_down)
			appendStringInfoString(&buf, "no answer");
		else
			appendStringInfo(&buf, "no answer within %d ms", timeout_ms);
	}
	/* brokers of another name (the cluster's own, after a bootstrap answered) */
	for (int i = 0; i < pe->n; i++)
		if (!told[i])
			appendStringInfo(&buf, "%s%s: %s", buf.len > 0 ? "; " : "", pe->e[i].broker,
							 why_unreachable(pe->e[i].err, pe->e[i].reason));
	return buf.data;
}

/*
 * The cluster's topics, as a List of ProbeTopic, or NIL with *reachable
 * false after a WARNING that says why no broker answered (what: "source"
 * or "sink", name its name, for the message).
 */
static List *
probe_topics(const char *what, const char *name, Jsonb *options, StmKafkaClient client,
			 bool *reachable)
{
	const char *bootstrap = stm_option_text(options, "bootstrap_servers");
	int			timeout_ms = Min(stm_guc_kafka_timeout_ms, PROBE_TIMEOUT_MS);
	ProbeErrors *pe = palloc0(sizeof(ProbeErrors));
	char		error_buf[STM_KAFKA_ERROR_LEN] = "";
	char		errstr[512];
	rd_kafka_conf_t *conf;
	rd_kafka_t *volatile rk = NULL;
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__TIMED_OUT;
	TimestampTz deadline = stm_kafka_deadline(timeout_ms);
	List	   *topics = NIL;
	ListCell   *lc;

	*reachable = false;
	conf = stm_kafka_conf_new(bootstrap, error_buf);
	foreach(lc, stm_option_pairs(options, "kafka_options"))
	{
		StmOptionPair *pair = lfirst(lc);

		stm_kafka_conf_set(conf, pair->key, pair->value);
	}
	rd_kafka_conf_set_opaque(conf, pe);
	rd_kafka_conf_set_error_cb(conf, probe_error_cb);
	rk = rd_kafka_new(client == STM_KAFKA_PRODUCER ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER,
					  conf, errstr, sizeof(errstr));
	if (rk == NULL)
	{
		rd_kafka_conf_destroy(conf);
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("%s \"%s\" could not make a Kafka client: %s", what, name, errstr),
				 errdetail("The %s is created anyway; its Kafka clients will fail the same way until its options are changed.",
						   what)));
		return NIL;
	}

	PG_TRY();
	{
		/* until a broker answers, all have failed once, or the deadline */
		while (!pe->all_down && stm_kafka_slice(deadline) > 0)
		{
			err = rd_kafka_metadata(rk, 1, NULL, &md,
									Min(PROBE_SLICE_MS, stm_kafka_slice(deadline)));
			if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
				break;
			(void) rd_kafka_poll(rk, 0);	/* serves the error callback */
			CHECK_FOR_INTERRUPTS();
		}
		(void) rd_kafka_poll(rk, 0);
		if (err == RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			for (int t = 0; t < md->topic_cnt; t++)
			{
				ProbeTopic *topic = palloc0(sizeof(ProbeTopic));

				topic->name = pstrdup(md->topics[t].topic);
				topic->err = md->topics[t].err;
				topic->npartitions = md->topics[t].partition_cnt;
				topic->partitions = palloc(sizeof(int32) * Max(topic->npartitions, 1));
				for (int p = 0; p < topic->npartitions; p++)
					topic->partitions[p] = md->topics[t].partitions[p].id;
				topics = lappend(topics, topic);
			}
			rd_kafka_metadata_destroy(md);
			*reachable = true;
		}
	}
	PG_FINALLY();
	{
		rd_kafka_destroy(rk);
	}
	PG_END_TRY();

	if (!*reachable)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("%s \"%s\" could not reach its Kafka brokers: %s", what, name,
						unreachable_list(bootstrap, pe, timeout_ms)),
				 strcmp(what, "sink") == 0 ?
				 errdetail("The sink is created anyway; streams that write to it keep their rows in the outbox until a broker answers.") :
				 errdetail("The source is created anyway; its streams wait (status waiting) until a broker answers."),
				 errhint("Check bootstrap_servers and that the brokers are up.")));
	return topics;
}

static ProbeTopic *
find_topic(List *topics, const char *name)
{
	ListCell   *lc;

	foreach(lc, topics)
		if (strcmp(((ProbeTopic *) lfirst(lc))->name, name) == 0)
			return lfirst(lc);
	return NULL;
}

/* "a", "b" */
static void
append_quoted(StringInfo buf, const char *name)
{
	appendStringInfo(buf, "%s\"%s\"", buf->len > 0 ? ", " : "", name);
}

/*
 * WARNINGs for the named topics that are missing or that the metadata
 * reports an error for (names: a List of char *); waits says what happens
 * meanwhile.
 */
static void
warn_topics(const char *what, const char *name, List *topics, List *names, const char *waits)
{
	StringInfoData missing;
	StringInfoData failing;
	int			nmissing = 0;
	ListCell   *lc;

	initStringInfo(&missing);
	initStringInfo(&failing);
	foreach(lc, names)
	{
		ProbeTopic *topic = find_topic(topics, lfirst(lc));

		if (topic == NULL || topic->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
		{
			append_quoted(&missing, lfirst(lc));
			nmissing++;
		}
		else if (topic->err != RD_KAFKA_RESP_ERR_NO_ERROR)
			appendStringInfo(&failing, "%stopic \"%s\": %s", failing.len > 0 ? "; " : "",
							 topic->name, rd_kafka_err2str(topic->err));
	}
	if (nmissing > 0)
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg_plural("%s \"%s\" names a Kafka topic that does not exist",
							   "%s \"%s\" names Kafka topics that do not exist",
							   nmissing, what, name),
				 errdetail_plural("Topic %s is not in the cluster's metadata. %s",
								  "Topics %s are not in the cluster's metadata. %s",
								  nmissing, missing.data, waits)));
	if (failing.len > 0)
		ereport(WARNING,
				(errcode(ERRCODE_CONNECTION_FAILURE),
				 errmsg("%s \"%s\" cannot read the metadata of its Kafka topics", what, name),
				 errdetail("%s.", failing.data)));
}

/* partitions => '{"t": [0, 1]}': the partitions that no topic has */
static void
warn_partitions(const char *name, List *topics, Jsonb *options)
{
	StringInfoData buf;
	ListCell   *lc;

	initStringInfo(&buf);
	foreach(lc, stm_option_pairs(options, "partitions"))
	{
		StmOptionPair *pair = lfirst(lc);
		ProbeTopic *topic = find_topic(topics, pair->key);
		ListCell   *lc2;

		if (topic == NULL || topic->err != RD_KAFKA_RESP_ERR_NO_ERROR)
			continue;			/* warn_topics says so */
		foreach(lc2, stm_option_elements(stm_option_jsonb(options, "partitions"), pair->key))
		{
			int32		partition = pg_strtoint32(lfirst(lc2));
			bool		found = false;

			for (int p = 0; p < topic->npartitions; p++)
				found |= topic->partitions[p] == partition;
			if (!found)
				appendStringInfo(&buf, "%spartition %d of topic \"%s\", which has %d",
								 buf.len > 0 ? "; " : "", partition, topic->name,
								 topic->npartitions);
		}
	}
	if (buf.len > 0)
		ereport(WARNING,
				(errcode(ERRCODE_UNDEFINED_OBJECT),
				 errmsg("source \"%s\" names Kafka partitions that do not exist", name),
				 errdetail("Not in the cluster's metadata: %s. Its streams read the other partitions and wait for these.",
						   buf.data)));
}

/* topic_pattern: does any topic match, as the source matches them? */
static void
warn_pattern(const char *name, List *topics, const char *pattern)
{
	text	   *anchored = cstring_to_text(psprintf("^(?:%s)$", pattern));
	ListCell   *lc;

	foreach(lc, topics)
	{
		ProbeTopic *topic = lfirst(lc);

		if (RE_compile_and_execute(anchored, topic->name, strlen(topic->name),
								   REG_ADVANCED, C_COLLATION_OID, 0, NULL))
			return;
	}
	ereport(WARNING,
			(errcode(ERRCODE_UNDEFINED_OBJECT),
			 errmsg("no Kafka topic matches the topic_pattern of source \"%s\"", name),
			 errdetail("No topic in the cluster's metadata matches \"%s\"; its streams wait until one does.",
					   pattern)));
}

/* create_kafka_source: can its brokers be reached, do its topics exist? */
void
stm_kafka_probe_source(const char *name, Jsonb *options)
{
	bool		reachable;
	List	   *topics = probe_topics("source", name, options, STM_KAFKA_CONSUMER, &reachable);
	const char *pattern = stm_option_text(options, "topic_pattern");
	const char *waits = "The source's streams wait (status waiting) while a topic they read is missing.";

	if (!reachable)
		return;
	if (pattern)
		warn_pattern(name, topics, pattern);
	else if (stm_option_given(options, "partitions"))
	{
		List	   *names = NIL;
		ListCell   *lc;

		foreach(lc, stm_option_pairs(options, "partitions"))
			names = lappend(names, ((StmOptionPair *) lfirst(lc))->key);
		warn_topics("source", name, topics, names, waits);
		warn_partitions(name, topics, options);
	}
	else
		warn_topics("source", name, topics, stm_option_elements(options, "topics"), waits);
}

/* create_kafka_sink: can its brokers be reached, does its topic exist? */
void
stm_kafka_probe_sink(const char *name, Jsonb *options)
{
	bool		reachable;
	List	   *topics = probe_topics("sink", name, options, STM_KAFKA_PRODUCER, &reachable);

	if (reachable)
		warn_topics("sink", name, topics, list_make1(stm_option_text(options, "topic")),
					"Streams that write to the sink keep their rows in the outbox until it exists; "
					"brokers that create topics on first use create it at the sink's first message.");
}
