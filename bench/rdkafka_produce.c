/*
 * bench/rdkafka_produce.c: librdkafka alone, producing as the Kafka sink
 * does (issue 21, item 6): the baseline of what its transport can cost.
 * By hand, not in CI.
 *
 * N messages shaped like bench/kafka_sink.sh's (a text key, a JSON order of
 * ~130 bytes, optionally the sink's three headers), idempotent, lz4,
 * murmur2_random, no message timeout, a report of every message, at most
 * WINDOW messages with the producer at a time (queue.buffering.max.messages,
 * as the outbox keeps it), reports served by rd_kafka_poll on the producing
 * thread.  Printed: messages/s, the producing thread's CPU per message and
 * the other threads' (librdkafka's), peak RSS.
 *
 *   gcc -O2 -o /tmp/rdkafka_produce bench/rdkafka_produce.c -lrdkafka
 *   test/mock_broker --topic t:32 &          (first line: the bootstrap)
 *   /tmp/rdkafka_produce BOOTSTRAP t N WINDOW HEADERS MXFAST [prop value]...
 *
 * HEADERS 0 or 1; MXFAST 0: mallopt(M_MXFAST, 0) as the sink's producer
 * does, 1: glibc's default.  Further pairs are producer properties.
 */
#include <librdkafka/rdkafka.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long reported = 0;

static void
dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	if (m->err)
	{
		fprintf(stderr, "delivery failed: %s\n", rd_kafka_err2str(m->err));
		exit(1);
	}
	reported++;
}

static double
clock_s(clockid_t id)
{
	struct timespec t;

	clock_gettime(id, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	const char *bootstrap,
			   *topic;
	long		n,
				window,
				sent = 0;
	int			headers,
				mxfast;
	char		err[512],
				num[32],
				value[256];
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_topic_t *rkt;
	const struct rd_kafka_metadata *md;
	double		t0,
				c0,
				t1,
				c1,
				all;
	struct rusage ru;

	if (argc < 7 || argc % 2 == 0)
	{
		fprintf(stderr, "usage: %s BOOTSTRAP TOPIC N WINDOW HEADERS MXFAST [prop value]...\n", argv[0]);
		return 2;
	}
	bootstrap = argv[1];
	topic = argv[2];
	n = atol(argv[3]);
	window = atol(argv[4]);
	headers = atoi(argv[5]);
	mxfast = atoi(argv[6]);
	if (mxfast == 0)
		mallopt(M_MXFAST, 0);

	conf = rd_kafka_conf_new();
#define SET(k, v) do { if (rd_kafka_conf_set(conf, (k), (v), err, sizeof(err)) != RD_KAFKA_CONF_OK) \
		{ fprintf(stderr, "%s\n", err); return 1; } } while (0)
	SET("bootstrap.servers", bootstrap);
	SET("partitioner", "murmur2_random");
	SET("compression.type", "lz4");
	for (int i = 7; i + 1 < argc; i += 2)
		SET(argv[i], argv[i + 1]);
	SET("enable.idempotence", "true");
	SET("acks", "all");
	SET("message.timeout.ms", "0");
	SET("delivery.report.only.error", "false");
	snprintf(num, sizeof(num), "%ld", window);
	SET("queue.buffering.max.messages", num);
	rd_kafka_conf_set_dr_msg_cb(conf, dr);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (rk == NULL)
	{
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	rkt = rd_kafka_topic_new(rk, topic, NULL);
	if (rd_kafka_metadata(rk, 0, rkt, &md, 5000) != RD_KAFKA_RESP_ERR_NO_ERROR)
	{
		fprintf(stderr, "no metadata for %s\n", topic);
		return 1;
	}
	rd_kafka_metadata_destroy(md);

	t0 = clock_s(CLOCK_MONOTONIC);
	c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	while (reported < n)
	{
		while (sent < n && sent - reported < window)
		{
			char		key[24],
						seq[24];
			int			keylen = snprintf(key, sizeof(key), "%ld", sent);
			int			valuelen = snprintf(value, sizeof(value),
											"{\"order_id\":%ld,\"user_id\":%ld,\"amount\":%ld.%02ld,\"status\":\"%s\","
											"\"event_time\":\"2026-12-01T%02ld:%02ld:%02ld.%03ld+00:00\"}",
											sent, (sent * 7919) % 100000, (sent * 31) % 1000, sent % 100,
											(sent % 3) ? "paid" : "shipped", (sent / 3600000) % 24,
											(sent / 60000) % 60, (sent / 1000) % 60, sent % 1000);
			rd_kafka_headers_t *hdrs = NULL;
			rd_kafka_resp_err_t e;

			if (headers)
			{
				hdrs = rd_kafka_headers_new(3);
				snprintf(seq, sizeof(seq), "%ld", sent);
				rd_kafka_header_add(hdrs, "streaming-seq", -1, seq, -1);
				rd_kafka_header_add(hdrs, "streaming-stream", -1, "kafka_1", -1);
				rd_kafka_header_add(hdrs, "streaming-batch-id", -1, "1", -1);
				e = rd_kafka_producev(rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
									  RD_KAFKA_V_KEY(key, keylen), RD_KAFKA_V_VALUE(value, valuelen),
									  RD_KAFKA_V_HEADERS(hdrs), RD_KAFKA_V_END);
			}
			else
				e = rd_kafka_producev(rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
									  RD_KAFKA_V_KEY(key, keylen), RD_KAFKA_V_VALUE(value, valuelen),
									  RD_KAFKA_V_END);
			if (e != RD_KAFKA_RESP_ERR_NO_ERROR && hdrs)
				rd_kafka_headers_destroy(hdrs);
			if (e == RD_KAFKA_RESP_ERR__QUEUE_FULL)
				break;
			if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				fprintf(stderr, "produce failed: %s\n", rd_kafka_err2str(e));
				return 1;
			}
			sent++;
		}
		rd_kafka_poll(rk, sent - reported >= window || sent == n ? 10 : 0);
	}
	t1 = clock_s(CLOCK_MONOTONIC);
	c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	getrusage(RUSAGE_SELF, &ru);
	all = ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
	printf("%ld messages, window %ld, headers %d, M_MXFAST %s: %.0f messages/s; CPU per message: "
		   "producing thread %.2f us, librdkafka's threads %.2f us; peak RSS %ld MB\n",
		   n, window, headers, mxfast ? "default" : "0", n / (t1 - t0), (c1 - c0) / n * 1e6,
		   (all - (c1 - c0)) / n * 1e6, ru.ru_maxrss / 1024);
	rd_kafka_topic_destroy(rkt);
	rd_kafka_destroy(rk);
	return 0;
}
