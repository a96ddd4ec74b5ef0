/*
 * bench/floor_latency.c: produce -> received by a consumer that reads as a
 * continuous stream's Kafka source does, with librdkafka alone (issue 21,
 * item 4): the floor of bench/latency.sh's figures, what any client of this
 * broker gets.  bench/latency.sh builds it (cc ... -lrdkafka) and runs it
 * beside the streams ("floor" lines).
 *
 *   floor_latency BOOTSTRAP TOPIC RATE SECONDS [prop value]...
 *   FLOOR_IDLE_SECONDS=S floor_latency ...
 *
 * The consumer is set up as source_kafka.c sets up a continuous stream's
 * (open_consumer and the source's options): enable.partition.eof,
 * queued.min.messages 10000000, fetch.min.bytes 1, fetch.wait.max.ms 5,
 * the prefetch sizes of the default streaming.batch_memory (64 MB); every
 * partition of TOPIC consumed from its end into one queue
 * (rd_kafka_consume_start_queue) whose wake-up writes a byte to a pipe
 * (rd_kafka_queue_io_event_enable); its thread sleeps in poll() on the
 * pipe and pops with rd_kafka_consume_batch_queue, as the worker does.
 * Further pairs are consumer properties (e.g. fetch.wait.max.ms 1: the
 * mock's fetch hold, see below).
 *
 * Once every partition reported its end, the main thread produces RATE
 * records a second for SECONDS (linger.ms 0, paced on the clock every
 * 0.5 ms as bench/latency_producer.py does), each a JSON order of the same
 * shape and size carrying "produced_at" (the wall clock just before
 * rd_kafka_produce, microseconds since the epoch).  Printed, over the
 * records after the first 2 s:
 *   records p50_ms p99_ms max_ms ack_p50_ms ack_p99_ms fetches/s wakeups/s
 * (ack: produce -> its delivery report, as the producer's rd_kafka_poll
 * serves it, every 0.5 ms; fetches/s: the consumer's Fetch requests while
 * producing, from its statistics once a second; wakeups/s: the consumer's
 * wake-ups by its pipe).  With FLOOR_IDLE_SECONDS, the
 * producer is then destroyed and the consumer left idle that long, and a
 * ninth figure is the process's CPU seconds a minute meanwhile (all its
 * threads: librdkafka's fetching nothing, what a continuous stream's
 * client costs before the worker does anything).
 *
 * Where the time goes with librdkafka 2.0.2's mock (rdkafka_mock_handlers.c,
 * rd_kafka_mock_handle_Fetch): a Fetch that finds no record is answered
 * empty after the full MaxWait (fetch.wait.max.ms), even when records
 * arrive meanwhile ("we should cut the wait short ... too much of a
 * hassle"), where a real broker answers at fetch.min.bytes; and it returns
 * one message set per partition (a record, with linger.ms 0) per Fetch,
 * found by a walk of the partition's list of message sets from its oldest
 * (rd_kafka_mock_msgset_find, "FIXME: Maintain an index").
 */
#define _GNU_SOURCE
#include <librdkafka/rdkafka.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define SKIP_US 2000000			/* the first 2 s left out, as bench/latency.sh does */

static const char *bootstrap;
static const char *topic;
static int	npart;
static volatile int eofs = 0;	/* partitions that reported their end (once) */
static volatile int stop = 0;
static int	wake_fds[2];
static double *lat;				/* ms, produce -> received */
static long nlat = 0;
static long cap;
static double *ack;				/* ms, produce -> delivery report */
static long nack = 0;
static long long first_us = -1;
static volatile long long produce_from = 0;	/* when the producing began */
static volatile int produced = 0;	/* ... and once every record is received */
static long long fetch_t0 = 0,
			fetch_t1 = 0;
static long fetch_n0,
			fetch_n1;
static volatile long received = 0;	/* records received, all of them */
static long wakeups = 0;		/* the consumer's pops, each after its pipe woke it */

static long long
now_us(void)
{
	struct timeval tv;

	gettimeofday(&tv, NULL);
	return (long long) tv.tv_sec * 1000000 + tv.tv_usec;
}

static void
set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
	char		err[512];

	if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
	{
		fprintf(stderr, "floor_latency: %s=%s: %s\n", k, v, err);
		exit(2);
	}
}

static long long
produced_at(const rd_kafka_message_t *m)
{
	const char *p = memmem(m->payload, m->len, "\"produced_at\":", 14);

	return p ? strtoll(p + 14, NULL, 10) : -1;
}

/* the consumer's statistics: its Fetch requests so far ("req":{...,"Fetch":N}) */
static int
stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
	const char *b = strstr(json, "\"brokers\":");
	const char *f;

	(void) rk;
	(void) len;
	(void) opaque;
	if (b && (f = strstr(b, "\"req\":")) != NULL && (f = strstr(f, "\"Fetch\":")) != NULL)
	{
		long		n = strtol(f + 8, NULL, 10);
		long long	t = now_us();

		/* the Fetch rate while records are produced (from the first snapshot after t0) */
		if (produce_from > 0 && t >= produce_from && fetch_t0 == 0)
		{
			fetch_t0 = t;
			fetch_n0 = n;
		}
		else if (fetch_t0 > 0 && !produced)
		{
			fetch_t1 = t;
			fetch_n1 = n;
		}
	}
	return 0;
}

static void *
consume(void *arg)
{
	rd_kafka_conf_t *conf = arg;
	char		err[512];
	rd_kafka_t *rk;
	rd_kafka_queue_t *q;
	rd_kafka_topic_t *rkt;
	rd_kafka_message_t *got[1000];

	rd_kafka_conf_set_stats_cb(conf, stats_cb);
	if (!(rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err))))
	{
		fprintf(stderr, "floor_latency: consumer: %s\n", err);
		exit(2);
	}
	q = rd_kafka_queue_new(rk);
	rd_kafka_queue_io_event_enable(q, wake_fds[1], "1", 1);
	rkt = rd_kafka_topic_new(rk, topic, NULL);
	for (int p = 0; p < npart; p++)
		if (rd_kafka_consume_start_queue(rkt, p, RD_KAFKA_OFFSET_END, q) != 0)
		{
			fprintf(stderr, "floor_latency: consume_start: %s\n",
					rd_kafka_err2str(rd_kafka_last_error()));
			exit(2);
		}
	while (!stop)
	{
		struct pollfd pfd = {wake_fds[0], POLLIN, 0};
		char		buf[64];
		ssize_t		n;

		(void) poll(&pfd, 1, 100);
		while (read(wake_fds[0], buf, sizeof(buf)) > 0)
			;
		rd_kafka_poll(rk, 0);	/* the statistics callback */
		if (pfd.revents & POLLIN)
			wakeups++;
		n = rd_kafka_consume_batch_queue(q, 0, got, 1000);
		for (ssize_t i = 0; i < n; i++)
		{
			rd_kafka_message_t *m = got[i];

			if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
			{
				if (eofs < npart)
					eofs++;
			}
			else if (m->err)
				fprintf(stderr, "floor_latency: %s\n", rd_kafka_message_errstr(m));
			else
			{
				long long t = now_us();
				long long at = produced_at(m);

				received++;
				if (at > 0 && first_us < 0)
					first_us = at;
				if (at > 0 && at >= first_us + SKIP_US && nlat < cap)
					lat[nlat++] = (t - at) / 1000.0;
			}
			rd_kafka_message_destroy(m);
		}
	}
	for (int p = 0; p < npart; p++)
		rd_kafka_consume_stop(rkt, p);
	rd_kafka_poll(rk, 0);
	rd_kafka_topic_destroy(rkt);
	rd_kafka_queue_destroy(q);
	rd_kafka_destroy(rk);
	return NULL;
}

static void
dr(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	(void) rk;
	(void) opaque;
	if (m->err)
	{
		fprintf(stderr, "floor_latency: delivery failed: %s\n", rd_kafka_err2str(m->err));
		exit(1);
	}
	if (m->_private && nack < cap)
	{
		long long at = (long long) (intptr_t) m->_private;

		if (first_us >= 0 && at >= first_us + SKIP_US)
			ack[nack++] = (now_us() - at) / 1000.0;
	}
}

/* the process's CPU seconds so far, all threads */
static double
cpu_secs(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int
cmp(const void *a, const void *b)
{
	double		x = *(const double *) a,
				y = *(const double *) b;

	return x < y ? -1 : x > y;
}

static double
q(double *v, long n, double f)
{
	long		i = (long) (f * n);

	return n == 0 ? -1 : v[i < n ? i : n - 1];
}

int
main(int argc, char **argv)
{
	char		err[512];
	rd_kafka_conf_t *pconf = rd_kafka_conf_new();
	rd_kafka_conf_t *cconf = rd_kafka_conf_new();
	rd_kafka_t *prod;
	rd_kafka_topic_t *prkt;
	const rd_kafka_metadata_t *md;
	pthread_t	th;
	int			rate;
	double		secs;
	long		total,
				sent = 0,
				oid = 1;
	long long	t0;
	double		wakeups_s;
	double		idle_cpu = -1;
	static const char *const statuses[] = {"created", "paid", "paid", "paid", "shipped", "cancelled"};

	if (argc < 5 || (argc - 5) % 2)
	{
		fprintf(stderr, "usage: floor_latency BOOTSTRAP TOPIC RATE SECONDS [prop value]...\n");
		return 2;
	}
	bootstrap = argv[1];
	topic = argv[2];
	rate = atoi(argv[3]);
	secs = atof(argv[4]);
	total = (long) (rate * secs);
	cap = total + 1;
	lat = malloc(sizeof(double) * cap);
	ack = malloc(sizeof(double) * cap);

	/* the producer: as bench/latency_producer.py's */
	set(pconf, "bootstrap.servers", bootstrap);
	set(pconf, "linger.ms", "0");
	set(pconf, "sticky.partitioning.linger.ms", "0");
	set(pconf, "queue.buffering.max.messages", "1000000");
	rd_kafka_conf_set_dr_msg_cb(pconf, dr);
	if (!(prod = rd_kafka_new(RD_KAFKA_PRODUCER, pconf, err, sizeof(err))))
	{
		fprintf(stderr, "floor_latency: producer: %s\n", err);
		return 2;
	}
	prkt = rd_kafka_topic_new(prod, topic, NULL);
	if (rd_kafka_metadata(prod, 0, prkt, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR ||
		md->topic_cnt != 1 || md->topics[0].err)
	{
		fprintf(stderr, "floor_latency: no metadata for topic %s\n", topic);
		return 2;
	}
	npart = md->topics[0].partition_cnt;
	rd_kafka_metadata_destroy(md);

	/* the consumer: as source_kafka.c's for trigger continuous */
	set(cconf, "bootstrap.servers", bootstrap);
	set(cconf, "client.id", "floor_latency");
	set(cconf, "enable.partition.eof", "true");
	set(cconf, "auto.offset.reset", "error");
	set(cconf, "enable.auto.commit", "false");
	set(cconf, "enable.auto.offset.store", "false");
	set(cconf, "isolation.level", "read_uncommitted");
	set(cconf, "queued.min.messages", "10000000");
	set(cconf, "fetch.min.bytes", "1");
	set(cconf, "fetch.wait.max.ms", "5");
	set(cconf, "queued.max.messages.kbytes", "16384");
	set(cconf, "fetch.message.max.bytes", "1048576");
	set(cconf, "fetch.max.bytes", "8388608");
	set(cconf, "receive.message.max.bytes", "100000000");
	set(cconf, "statistics.interval.ms", "1000");
	for (int i = 5; i < argc; i += 2)
		set(cconf, argv[i], argv[i + 1]);
	if (pipe(wake_fds) != 0 || fcntl(wake_fds[0], F_SETFL, O_NONBLOCK) != 0 ||
		fcntl(wake_fds[1], F_SETFL, O_NONBLOCK) != 0)
	{
		perror("floor_latency: pipe");
		return 2;
	}
	pthread_create(&th, NULL, consume, cconf);
	for (int i = 0; eofs < npart; i++)
	{
		if (i > 20000)
		{
			fprintf(stderr, "floor_latency: the consumer never reached the end of %s\n", topic);
			return 1;
		}
		usleep(1000);
	}

	t0 = now_us();
	produce_from = t0;
	srand(7);
	while (sent < total)
	{
		long		due = (long) ((now_us() - t0) / 1e6 * rate) + 1;

		if (due > total)
			due = total;
		while (sent < due)
		{
			char		rec[256];
			int			cents = 1000 + rand() % 99000;
			long long	at = now_us();
			time_t		s = at / 1000000;
			struct tm	tm;
			char		ts[32];
			int			len;

			gmtime_r(&s, &tm);
			strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
			len = snprintf(rec, sizeof(rec),
						   "{\"order_id\":%ld,\"user_id\":%d,\"amount\":%d.%02d,\"status\":\"%s\","
						   "\"event_time\":\"%s.%06lldZ\",\"rate\":%d,\"produced_at\":%lld}",
						   oid, 100000 + rand() % 900000, cents / 100, cents % 100,
						   statuses[rand() % 6], ts, at % 1000000, rate, at);
			while (rd_kafka_produce(prkt, RD_KAFKA_PARTITION_UA, RD_KAFKA_MSG_F_COPY, rec, len,
									NULL, 0, (void *) (intptr_t) at) != 0)
				rd_kafka_poll(prod, 1);
			oid++;
			sent++;
		}
		rd_kafka_poll(prod, 0);
		usleep(500);
	}
	rd_kafka_flush(prod, 30000);
	/* every record delivered is received (a consumer that fell behind catches up), within 60 s */
	for (int i = 0; received < total && i < 60000; i++)
		usleep(1000);
	produced = 1;
	rd_kafka_topic_destroy(prkt);
	rd_kafka_destroy(prod);
	wakeups_s = wakeups * 1e6 / (now_us() - t0);
	if (getenv("FLOOR_IDLE_SECONDS"))
	{
		double		idle = atof(getenv("FLOOR_IDLE_SECONDS"));
		double		c0 = cpu_secs();

		usleep((useconds_t) (idle * 1e6));
		idle_cpu = (cpu_secs() - c0) * 60 / idle;
	}
	stop = 1;
	pthread_join(th, NULL);

	qsort(lat, nlat, sizeof(double), cmp);
	qsort(ack, nack, sizeof(double), cmp);
	printf("%ld %.2f %.2f %.1f %.2f %.2f %.0f %.0f %.3f\n", nlat, q(lat, nlat, 0.5), q(lat, nlat, 0.99),
		   nlat ? lat[nlat - 1] : -1.0, q(ack, nack, 0.5), q(ack, nack, 0.99),
		   fetch_t1 > fetch_t0 ? (fetch_n1 - fetch_n0) * 1e6 / (fetch_t1 - fetch_t0) : -1.0,
		   wakeups_s, idle_cpu);
	return nlat > 0 ? 0 : 1;
}
