/*-------------------------------------------------------------------------
 *
 * mock_broker.c
 *	  A standalone Kafka broker for the tests and the demo, built on
 *	  librdkafka's mock cluster (rdkafka_mock.h).
 *
 * The streaming extension reads from Kafka.  Its tests and the demo need a
 * broker, and requiring a JVM, ZooKeeper/KRaft and a running Kafka for
 * "make test" would make the tests slow and fragile.  librdkafka, which we
 * link against anyway, contains an in-process mock Kafka cluster that speaks
 * enough of the protocol (Metadata, Produce, Fetch, ListOffsets, consumer
 * groups, offset commits) for our purposes.  This program wraps it in a
 * process that listens on loopback, so that PostgreSQL backends, kcat and
 * scripts can all talk to it like to a real broker.  It is the embedded
 * default broker of test/kafka_env.sh; every test can instead run against a
 * real broker by setting KAFKA_BOOTSTRAP_SERVERS.
 *
 * Usage:
 *	  mock_broker [--brokers N] [--topic NAME:PARTITIONS]...
 *				  [--bootstrap-file FILE] [--stdin]
 *
 * When the cluster is ready, the bootstrap servers string is printed as the
 * first line of stdout and, with --bootstrap-file, written atomically to
 * FILE (FILE.tmp, then rename), so that scripts can wait for FILE to appear.
 *
 * Signals: SIGTERM or SIGINT destroys the cluster and exits 0; SIGUSR1 takes
 * all brokers down (connections are closed and refused), SIGUSR2 brings them
 * back up.  The handlers only set flags; the main loop acts on them within
 * about 50 ms.
 *
 * With --stdin, command lines are read from stdin and each is answered with
 * "ok" or "error: ..." on stdout:
 *	  create TOPIC PARTITIONS	create a topic
 *	  down [BROKER]				take all brokers (or broker id BROKER) down
 *								(all: like SIGUSR1)
 *	  up [BROKER]				bring all brokers (or BROKER) up (all: like SIGUSR2)
 *	  leader TOPIC PARTITION BROKER
 *								move a partition's leader to broker BROKER
 *	  topic-error TOPIC ERR		metadata requests for TOPIC answer with Kafka
 *								error ERR, a code (e.g. 3 unknown topic, 29 not
 *								authorized) or librdkafka's name without the
 *								RD_KAFKA_RESP_ERR_ prefix (e.g.
 *								TOPIC_AUTHORIZATION_FAILED); 0 or NO_ERROR
 *								clears it
 *	  request-errors APIKEY CODE COUNT
 *								the next COUNT requests of Kafka API APIKEY
 *								(e.g. 1 Fetch, 2 ListOffsets) fail with CODE
 *	  produce-error ERR COUNT	the next COUNT produce requests fail with ERR
 *	  rtt MS					every broker answers MS milliseconds late
 *								(0: at once again)
 *	  quit						exit 0 (so does end of input)
 *
 * Broker ids are 1..N (--brokers N); partition leaders are spread over them.
 *
 * Limitations of the mock cluster (librdkafka 2.0.2) worth knowing:
 *	- It keeps at most 5 MiB of message sets per partition and silently
 *	  drops the oldest ones beyond that, like an aggressive retention
 *	  policy.  rdkafka_mock.h offers nothing to raise that limit.  Spread
 *	  large data sets over enough partitions (e.g. 32 partitions for 1M
 *	  records of ~110 bytes) or produce compressed, and check that every
 *	  partition's low watermark is still 0 after producing.
 *	  Keyless records from a fast librdkafka producer are not spread
 *	  evenly by default: the sticky partitioner sends each burst to one
 *	  partition (1M records took 24 to 116,810 records per partition), so
 *	  produce with sticky.partitioning.linger.ms=0 (see kafka_produce in
 *	  test/kafka_env.sh).
 *	- Any client request for the metadata of a topic that does not exist
 *	  (a producer, a consumer, even "kcat -L -t NAME") auto-creates it with
 *	  4 partitions.
 *	- Topics are created with replication factor 1 as asked, but the mock
 *	  lists min(3, N) replicas per partition anyway; replicas are only
 *	  metadata in the mock, and partition leaders are spread over brokers.
 *	- All data lives in memory and is gone when the process exits.
 *	  Destroying the cluster takes about 1 s in roughly a third of the
 *	  runs (inside librdkafka), so exiting can take that long.
 *	- The CreateTopics admin API is not supported: create topics with
 *	  --topic or the "create" command.  There are no aborted transactions.
 *
 *-------------------------------------------------------------------------
 */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#define MAX_BROKERS		64
#define MAX_PARTITIONS	10000
#define MAX_TOPIC_LEN	249
#define LINE_MAX_LEN	4096
#define POLL_MS			50

typedef struct TopicSpec
{
	const char *name;
	int			partitions;
} TopicSpec;

static volatile sig_atomic_t got_terminate = 0;
static volatile sig_atomic_t got_down = 0;
static volatile sig_atomic_t got_up = 0;

static const char *progname = "mock_broker";

static void
usage(FILE *out)
{
	fprintf(out,
			"%s runs librdkafka's mock Kafka cluster on loopback for tests and the demo.\n"
			"\n"
			"Usage:\n"
			"  %s [--brokers N] [--topic NAME:PARTITIONS]... [--bootstrap-file FILE] [--stdin]\n"
			"\n"
			"Options:\n"
			"  --brokers N               number of brokers (1..%d, default 1)\n"
			"  --topic NAME:PARTITIONS   create topic NAME with PARTITIONS partitions\n"
			"                            (1..%d); may be repeated\n"
			"  --bootstrap-file FILE     also write the bootstrap servers to FILE\n"
			"                            (atomically: FILE.tmp, then rename)\n"
			"  --stdin                   read commands from stdin, answer \"ok\" or\n"
			"                            \"error: ...\" on stdout:\n"
			"                              create TOPIC PARTITIONS\n"
			"                              down | up | quit   (end of input = quit)\n"
			"                              topic-error TOPIC ERR (NO_ERROR clears it)\n"
			"                              produce-error ERR COUNT\n"
			"                              rtt MS   (answers MS milliseconds late)\n"
			"  -h, --help                show this help and exit\n"
			"\n"
			"The bootstrap servers string is the first line of stdout.\n"
			"SIGTERM/SIGINT: exit 0.  SIGUSR1: all brokers down.  SIGUSR2: all up.\n"
			"Topics that clients merely look up (metadata request) are auto-created\n"
			"by the mock with 4 partitions.  The mock keeps at most 5 MiB per partition and\n"
			"drops older data beyond that.\n",
			progname, progname, MAX_BROKERS, MAX_PARTITIONS);
}

/* Usage synopsis for errors on stderr. */
static void
short_usage(void)
{
	fprintf(stderr,
			"Usage: %s [--brokers N] [--topic NAME:PARTITIONS]... [--bootstrap-file FILE] [--stdin]\n"
			"Try \"%s --help\" for more information.\n",
			progname, progname);
}

static void
bad_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "%s: ", progname);
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	short_usage();
	exit(2);
}

static void
handle_signal(int signo)
{
	switch (signo)
	{
		case SIGTERM:
		case SIGINT:
			got_terminate = 1;
			break;
		case SIGUSR1:
			got_down = 1;
			got_up = 0;
			break;
		case SIGUSR2:
			got_up = 1;
			got_down = 0;
			break;
	}
}

/*
 * Parse a decimal integer in [min, max]; returns false if s is not one.
 */
static bool
parse_int(const char *s, int min, int max, int *result)
{
	char	   *end;
	long		val;

	if (*s == '\0' || isspace((unsigned char) *s))
		return false;
	errno = 0;
	val = strtol(s, &end, 10);
	if (errno != 0 || *end != '\0' || val < min || val > max)
		return false;
	*result = (int) val;
	return true;
}

/*
 * Kafka topic names: 1..249 characters from [a-zA-Z0-9._-], not "." or "..".
 * Returns NULL if valid, else a description of the problem.
 */
static const char *
check_topic_name(const char *name)
{
	size_t		len = strlen(name);
	const char *p;

	if (len == 0)
		return "topic name is empty";
	if (len > MAX_TOPIC_LEN)
		return "topic name is longer than 249 characters";
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return "topic name cannot be \".\" or \"..\"";
	for (p = name; *p; p++)
	{
		if (!isalnum((unsigned char) *p) && *p != '.' && *p != '_' && *p != '-')
			return "topic name may only contain ASCII letters, digits, '.', '_' and '-'";
	}
	return NULL;
}

/*
 * A librdkafka error code by its name without the RD_KAFKA_RESP_ERR_ prefix
 * ("TOPIC_AUTHORIZATION_FAILED"); false if there is none of that name.
 */
static bool
parse_error_name(const char *name, rd_kafka_resp_err_t *err)
{
	const struct rd_kafka_err_desc *descs;
	size_t		n;

	rd_kafka_get_err_descs(&descs, &n);
	for (size_t i = 0; i < n; i++)
		if (descs[i].name != NULL && strcmp(descs[i].name, name) == 0)
		{
			*err = descs[i].code;
			return true;
		}
	return false;
}

/* A Kafka error given by its code or by its name. */
static bool
parse_error(const char *word, rd_kafka_resp_err_t *err)
{
	int			code;

	if (parse_int(word, -200, 1000, &code))
	{
		*err = (rd_kafka_resp_err_t) code;
		return true;
	}
	return parse_error_name(word, err);
}

static void
reply(const char *fmt, const char *arg)
{
	printf(fmt, arg);
	putchar('\n');
	fflush(stdout);
}

static rd_kafka_resp_err_t
set_all_brokers(rd_kafka_mock_cluster_t *mcluster, int nbrokers, bool up)
{
	rd_kafka_resp_err_t err;
	int			id;

	/* Broker ids are 1..nbrokers. */
	for (id = 1; id <= nbrokers; id++)
	{
		if (up)
			err = rd_kafka_mock_broker_set_up(mcluster, id);
		else
			err = rd_kafka_mock_broker_set_down(mcluster, id);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			return err;
	}
	return RD_KAFKA_RESP_ERR_NO_ERROR;
}

/*
 * Execute one stdin command.  Returns false if the program should exit.
 */
static bool
run_command(char *line, rd_kafka_mock_cluster_t *mcluster, int nbrokers)
{
	char	   *words[5];
	int			nwords = 0;
	char	   *tok;
	char	   *save;
	rd_kafka_resp_err_t err;

	for (tok = strtok_r(line, " \t\r", &save); tok != NULL;
		 tok = strtok_r(NULL, " \t\r", &save))
	{
		if (nwords == 5)
		{
			reply("error: too many arguments", NULL);
			return true;
		}
		words[nwords++] = tok;
	}

	if (nwords == 0)
		return true;			/* ignore empty lines */

	if (strcmp(words[0], "create") == 0)
	{
		const char *problem;
		int			partitions;

		if (nwords != 3)
		{
			reply("error: usage: create TOPIC PARTITIONS", NULL);
			return true;
		}
		if ((problem = check_topic_name(words[1])) != NULL)
		{
			reply("error: %s", problem);
			return true;
		}
		if (!parse_int(words[2], 1, MAX_PARTITIONS, &partitions))
		{
			reply("error: invalid partition count \"%s\"", words[2]);
			return true;
		}
		err = rd_kafka_mock_topic_create(mcluster, words[1], partitions, 1);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			reply("error: %s", rd_kafka_err2str(err));
		else
			reply("ok", NULL);
	}
	else if (strcmp(words[0], "down") == 0 || strcmp(words[0], "up") == 0)
	{
		bool		up = (words[0][0] == 'u');
		int			broker;

		if (nwords > 2 || (nwords == 2 && !parse_int(words[1], 1, nbrokers, &broker)))
		{
			reply("error: usage: %s [BROKER], BROKER from 1 to the number of brokers", words[0]);
			return true;
		}
		if (nwords == 1)
			err = set_all_brokers(mcluster, nbrokers, up);
		else if (up)
			err = rd_kafka_mock_broker_set_up(mcluster, broker);
		else
			err = rd_kafka_mock_broker_set_down(mcluster, broker);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			reply("error: %s", rd_kafka_err2str(err));
		else
			reply("ok", NULL);
	}
	else if (strcmp(words[0], "leader") == 0)
	{
		int			partition;
		int			broker;

		if (nwords != 4 || !parse_int(words[2], 0, MAX_PARTITIONS, &partition) ||
			!parse_int(words[3], 1, nbrokers, &broker))
		{
			reply("error: usage: leader TOPIC PARTITION BROKER", NULL);
			return true;
		}
		err = rd_kafka_mock_partition_set_leader(mcluster, words[1], partition, broker);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			reply("error: %s", rd_kafka_err2str(err));
		else
			reply("ok", NULL);
	}
	else if (strcmp(words[0], "topic-error") == 0)
	{
		rd_kafka_resp_err_t terr;

		if (nwords != 3)
		{
			reply("error: usage: topic-error TOPIC ERR", NULL);
			return true;
		}
		if (!parse_error(words[2], &terr))
		{
			reply("error: unknown error \"%s\" (a code or a name such as UNKNOWN_TOPIC_OR_PART)", words[2]);
			return true;
		}
		rd_kafka_mock_topic_set_error(mcluster, words[1], terr);
		reply("ok", NULL);
	}
	else if (strcmp(words[0], "produce-error") == 0)
	{
		rd_kafka_resp_err_t perr;
		int			count;

		if (nwords != 3)
		{
			reply("error: usage: produce-error ERR COUNT", NULL);
			return true;
		}
		if (!parse_error(words[1], &perr))
		{
			reply("error: unknown error name \"%s\"", words[1]);
			return true;
		}
		if (!parse_int(words[2], 1, 1000000, &count))
		{
			reply("error: invalid count \"%s\"", words[2]);
			return true;
		}
		for (int i = 0; i < count; i++)
			rd_kafka_mock_push_request_errors(mcluster, 0 /* Produce */ , 1, perr);
		reply("ok", NULL);
	}
	else if (strcmp(words[0], "request-errors") == 0)
	{
		int			apikey;
		int			code;
		int			count;
		rd_kafka_resp_err_t errs[1000];

		if (nwords != 4 || !parse_int(words[1], 0, 1000, &apikey) ||
			!parse_int(words[2], 0, 1000, &code) || !parse_int(words[3], 1, 1000, &count))
		{
			reply("error: usage: request-errors APIKEY CODE COUNT (COUNT at most 1000)", NULL);
			return true;
		}
		for (int i = 0; i < count; i++)
			errs[i] = (rd_kafka_resp_err_t) code;
		rd_kafka_mock_push_request_errors_array(mcluster, (int16_t) apikey, (size_t) count, errs);
		reply("ok", NULL);
	}
	else if (strcmp(words[0], "rtt") == 0)
	{
		int			rtt;

		if (nwords != 2 || !parse_int(words[1], 0, 3600 * 1000, &rtt))
		{
			reply("error: usage: rtt MS", NULL);
			return true;
		}
		for (int id = 1; id <= nbrokers; id++)
		{
			err = rd_kafka_mock_broker_set_rtt(mcluster, id, rtt);
			if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
			{
				reply("error: %s", rd_kafka_err2str(err));
				return true;
			}
		}
		reply("ok", NULL);
	}
	else if (strcmp(words[0], "quit") == 0)
	{
		reply("ok", NULL);
		return false;
	}
	else
		reply("error: unknown command \"%s\" (expected create, down, up, leader, topic-error, request-errors, produce-error, rtt or quit)",
			  words[0]);

	return true;
}

/*
 * Write the bootstrap string to path via path.tmp and rename(2), so that a
 * reader that sees the file sees all of it.
 */
static bool
write_bootstrap_file(const char *path, const char *bootstraps)
{
	char	   *tmp;
	FILE	   *f;
	size_t		len = strlen(path) + sizeof(".tmp");

	tmp = malloc(len);
	if (tmp == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		return false;
	}
	snprintf(tmp, len, "%s.tmp", path);

	f = fopen(tmp, "w");
	if (f == NULL)
	{
		fprintf(stderr, "%s: could not create \"%s\": %s\n",
				progname, tmp, strerror(errno));
		free(tmp);
		return false;
	}
	if (fprintf(f, "%s\n", bootstraps) < 0 || fclose(f) != 0)
	{
		fprintf(stderr, "%s: could not write \"%s\": %s\n",
				progname, tmp, strerror(errno));
		unlink(tmp);
		free(tmp);
		return false;
	}
	if (rename(tmp, path) != 0)
	{
		fprintf(stderr, "%s: could not rename \"%s\" to \"%s\": %s\n",
				progname, tmp, path, strerror(errno));
		unlink(tmp);
		free(tmp);
		return false;
	}
	free(tmp);
	return true;
}

int
main(int argc, char **argv)
{
	int			nbrokers = 1;
	TopicSpec  *topics;
	int			ntopics = 0;
	const char *bootstrap_file = NULL;
	bool		use_stdin = false;
	bool		stdin_open;
	char		linebuf[LINE_MAX_LEN];
	size_t		linelen = 0;
	bool		discarding = false;
	sigset_t	sigs;
	sigset_t	oldsigs;
	struct sigaction sa;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;
	rd_kafka_mock_cluster_t *mcluster;
	char		errstr[512];
	const char *bootstraps;
	int			i;

	if (argc > 0 && argv[0] != NULL && argv[0][0] != '\0')
	{
		const char *slash = strrchr(argv[0], '/');

		progname = slash ? slash + 1 : argv[0];
	}

	topics = calloc(argc > 0 ? argc : 1, sizeof(TopicSpec));
	if (topics == NULL)
	{
		fprintf(stderr, "%s: out of memory\n", progname);
		return 1;
	}

	for (i = 1; i < argc; i++)
	{
		const char *arg = argv[i];

		if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0)
		{
			usage(stdout);
			return 0;
		}
		else if (strcmp(arg, "--stdin") == 0)
			use_stdin = true;
		else if (strcmp(arg, "--brokers") == 0 ||
				 strcmp(arg, "--topic") == 0 ||
				 strcmp(arg, "--bootstrap-file") == 0)
		{
			const char *val;

			if (i + 1 >= argc)
				bad_usage("option %s requires an argument", arg);
			val = argv[++i];

			if (strcmp(arg, "--brokers") == 0)
			{
				if (!parse_int(val, 1, MAX_BROKERS, &nbrokers))
				{
					fprintf(stderr, "%s: --brokers must be an integer from 1 to %d, not \"%s\"\n",
							progname, MAX_BROKERS, val);
					short_usage();
					return 2;
				}
			}
			else if (strcmp(arg, "--topic") == 0)
			{
				char	   *name = strdup(val);
				char	   *colon;
				const char *problem;
				int			j;

				if (name == NULL)
				{
					fprintf(stderr, "%s: out of memory\n", progname);
					return 1;
				}
				colon = strrchr(name, ':');
				if (colon == NULL)
					bad_usage("--topic expects NAME:PARTITIONS, not \"%s\"", val);
				*colon = '\0';
				if ((problem = check_topic_name(name)) != NULL)
				{
					fprintf(stderr, "%s: --topic \"%s\": %s\n", progname, val, problem);
					short_usage();
					return 2;
				}
				if (!parse_int(colon + 1, 1, MAX_PARTITIONS, &topics[ntopics].partitions))
				{
					fprintf(stderr, "%s: --topic \"%s\": partition count must be an integer from 1 to %d\n",
							progname, val, MAX_PARTITIONS);
					short_usage();
					return 2;
				}
				for (j = 0; j < ntopics; j++)
				{
					if (strcmp(topics[j].name, name) == 0)
						bad_usage("--topic \"%s\" is given more than once", name);
				}
				topics[ntopics++].name = name;
			}
			else
			{
				if (val[0] == '\0')
					bad_usage("--bootstrap-file must not be empty%s", "");
				bootstrap_file = val;
			}
		}
		else if (arg[0] == '-')
			bad_usage("unknown option \"%s\"", arg);
		else
			bad_usage("unexpected argument \"%s\"", arg);
	}

	/*
	 * Writing to a closed stdout (the script that started us went away)
	 * must not kill us with SIGPIPE; output errors are simply ignored.
	 */
	signal(SIGPIPE, SIG_IGN);

	/*
	 * Install the handlers, then block the signals while librdkafka starts
	 * its threads so that they inherit a mask with these signals blocked:
	 * the signals are then delivered to the main thread only, where they
	 * interrupt poll().
	 */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handle_signal;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = 0;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGUSR2, &sa, NULL);

	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGUSR1);
	sigaddset(&sigs, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &sigs, &oldsigs);

	/*
	 * The mock cluster needs a client handle for its bookkeeping; an idle
	 * producer with no bootstrap servers does nothing else.
	 */
	conf = rd_kafka_conf_new();
	/* Hide the notice that this handle has no bootstrap.servers. */
	if (rd_kafka_conf_set(conf, "log_level", "4", errstr, sizeof(errstr)) != RD_KAFKA_CONF_OK)
		fprintf(stderr, "%s: %s\n", progname, errstr);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof(errstr));
	if (rk == NULL)
	{
		fprintf(stderr, "%s: could not create Kafka handle: %s\n", progname, errstr);
		return 1;
	}

	mcluster = rd_kafka_mock_cluster_new(rk, nbrokers);
	if (mcluster == NULL)
	{
		fprintf(stderr, "%s: could not create mock cluster\n", progname);
		rd_kafka_destroy(rk);
		return 1;
	}

	pthread_sigmask(SIG_SETMASK, &oldsigs, NULL);

	for (i = 0; i < ntopics; i++)
	{
		rd_kafka_resp_err_t err;

		err = rd_kafka_mock_topic_create(mcluster, topics[i].name,
										 topics[i].partitions, 1);
		if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
		{
			fprintf(stderr, "%s: could not create topic \"%s\": %s\n",
					progname, topics[i].name, rd_kafka_err2str(err));
			rd_kafka_mock_cluster_destroy(mcluster);
			rd_kafka_destroy(rk);
			return 1;
		}
	}

	bootstraps = rd_kafka_mock_cluster_bootstraps(mcluster);
	printf("%s\n", bootstraps);
	fflush(stdout);

	if (bootstrap_file != NULL &&
		!write_bootstrap_file(bootstrap_file, bootstraps))
	{
		rd_kafka_mock_cluster_destroy(mcluster);
		rd_kafka_destroy(rk);
		return 1;
	}

	stdin_open = use_stdin;

	while (!got_terminate)
	{
		struct pollfd pfd;
		int			rc;

		if (got_down)
		{
			rd_kafka_resp_err_t err;

			got_down = 0;
			err = set_all_brokers(mcluster, nbrokers, false);
			if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
				fprintf(stderr, "%s: could not take brokers down: %s\n",
						progname, rd_kafka_err2str(err));
		}
		if (got_up)
		{
			rd_kafka_resp_err_t err;

			got_up = 0;
			err = set_all_brokers(mcluster, nbrokers, true);
			if (err != RD_KAFKA_RESP_ERR_NO_ERROR)
				fprintf(stderr, "%s: could not bring brokers up: %s\n",
						progname, rd_kafka_err2str(err));
		}

		pfd.fd = STDIN_FILENO;
		pfd.events = POLLIN;
		pfd.revents = 0;
		rc = poll(&pfd, stdin_open ? 1 : 0, POLL_MS);
		if (rc < 0)
		{
			if (errno == EINTR)
				continue;
			fprintf(stderr, "%s: poll failed: %s\n", progname, strerror(errno));
			break;
		}
		if (rc == 0 || !stdin_open)
			continue;

		/* stdin is readable (data, EOF or error) */
		{
			char		buf[LINE_MAX_LEN];
			ssize_t		n;
			ssize_t		k;
			bool		quit = false;

			n = read(STDIN_FILENO, buf, sizeof(buf));
			if (n < 0)
			{
				if (errno == EINTR || errno == EAGAIN)
					continue;
				fprintf(stderr, "%s: could not read stdin: %s\n",
						progname, strerror(errno));
				n = 0;
			}
			if (n == 0)
			{
				/* EOF: run an unterminated last line, then quit. */
				if (linelen > 0 && !discarding)
				{
					linebuf[linelen] = '\0';
					run_command(linebuf, mcluster, nbrokers);
				}
				break;
			}

			for (k = 0; k < n && !quit; k++)
			{
				if (buf[k] == '\n')
				{
					if (discarding)
						reply("error: command line too long", NULL);
					else
					{
						linebuf[linelen] = '\0';
						quit = !run_command(linebuf, mcluster, nbrokers);
					}
					linelen = 0;
					discarding = false;
				}
				else if (discarding)
					continue;
				else if (linelen + 1 >= sizeof(linebuf))
					discarding = true;
				else
					linebuf[linelen++] = buf[k];
			}
			if (quit)
				break;
		}
	}

	rd_kafka_mock_cluster_destroy(mcluster);
	rd_kafka_destroy(rk);
	for (i = 0; i < ntopics; i++)
		free((char *) topics[i].name);
	free(topics);
	return 0;
}
