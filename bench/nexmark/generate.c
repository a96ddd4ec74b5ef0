/*
 * bench/nexmark/generate.c: Nexmark's person, auction and bid events as
 * JSON lines, one file per kind (bench/nexmark/run.sh produces them into
 * Kafka topics).
 *
 *     generate EVENTS RATE BASE_MS SEED OUTDIR
 *
 * EVENTS events in all, RATE events per second of event time from BASE_MS
 * (ms since the epoch), a deterministic stream for SEED; writes
 * OUTDIR/person.jsonl, OUTDIR/auction.jsonl and OUTDIR/bid.jsonl and prints
 * "persons auctions bids q2_rows q3_rows q8_rows": what q2 must select (the
 * bids whose auction id is a multiple of 123), q3 (auctions of category 10
 * by a person of OR, ID or CA) and q8 (persons who created an auction in
 * the 10-second window they were created in).
 *
 * The model follows the Nexmark generator as Apache Beam and the
 * nexmark/nexmark repository (Flink) write it, with their default
 * configuration:
 *
 * - event n (0, 1, ...) has event time BASE_MS + n * 1000 / RATE, and its
 *   kind from n mod 50: 0 a person, 1-3 an auction, 4-49 a bid (proportions
 *   1 : 3 : 46, so 92% of the events are bids); events are in event-time
 *   order (outOfOrderGroupSize 1);
 * - person and auction ids count from 1000 in their order of creation;
 *   categories are 10-14;
 * - a bid's auction is, with probability 1/2 (hotAuctionRatio 2), the
 *   first of the last hundred auctions ("hot"), else one of the 100 most
 *   recent ones (numInFlightAuctions) or of the 10 that come next; its
 *   bidder, with probability 3/4 (hotBiddersRatio 4), the second of the
 *   last hundred people, else one of the 1000 most recent (numActivePeople)
 *   or of the 10 next; an auction's seller likewise (hotSellersRatio 4,
 *   the first of the last hundred);
 * - prices are round(10^(6u) * 100) for u uniform in [0, 1); a reserve is
 *   the initial bid plus another price; an auction runs for a random time
 *   of on average the event time until 100 auctions later;
 * - a bid's channel is, with probability 1/2, one of Google, Facebook,
 *   Baidu and Apple with its fixed URL, else "channel-N" (N < 10000) whose
 *   URL carries "&channel_id=" + the bit-reversed N nine times in ten;
 * - strings are random lowercase letters (names up to 20, descriptions up
 *   to 100, with a space one time in 13), and "extra" pads each event to its
 *   average size: 200 bytes for a person, 500 for an auction, 100 for a bid
 *   (the sizes of the fields counted as the Java generator counts them).
 *
 * What differs: Java's java.util.Random is replaced by splitmix64 (the
 * Java generators are not seeded either), and there is no rate shape other
 * than a constant rate.  JSON keys are the columns' names in snake case
 * (date_time, email_address, credit_card, item_name, initial_bid), and
 * times are RFC 3339 in UTC with milliseconds.
 */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PERSON_PROPORTION 1
#define AUCTION_PROPORTION 3
#define BID_PROPORTION 46
#define TOTAL_PROPORTION (PERSON_PROPORTION + AUCTION_PROPORTION + BID_PROPORTION)

#define FIRST_PERSON_ID 1000
#define FIRST_AUCTION_ID 1000
#define FIRST_CATEGORY_ID 10
#define NUM_CATEGORIES 5

#define AVG_PERSON_BYTES 200
#define AVG_AUCTION_BYTES 500
#define AVG_BID_BYTES 100

#define HOT_AUCTION_RATIO 2
#define HOT_SELLERS_RATIO 4
#define HOT_BIDDERS_RATIO 4
#define HOT_GROUP 100			/* the hot one of each hundred */
#define NUM_IN_FLIGHT_AUCTIONS 100
#define NUM_ACTIVE_PEOPLE 1000
#define ID_LEAD 10				/* ids not created yet that may be chosen */

#define HOT_CHANNELS_RATIO 2
#define NUM_CHANNELS 10000

static uint64_t rng_state;

/* splitmix64 */
static uint64_t
next64(void)
{
	uint64_t	z = (rng_state += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* uniform in [0, n) */
static int64_t
next_below(int64_t n)
{
	return n <= 1 ? 0 : (int64_t) (next64() % (uint64_t) n);
}

static double
next_double(void)
{
	return (next64() >> 11) * (1.0 / 9007199254740992.0);
}

/* ---- ids, as the Java generator derives them from the event number ---- */

static int64_t
last_base0_person_id(int64_t event_id)
{
	int64_t		epoch = event_id / TOTAL_PROPORTION;
	int64_t		offset = event_id % TOTAL_PROPORTION;

	if (offset >= PERSON_PROPORTION)
		offset = PERSON_PROPORTION - 1;
	return epoch * PERSON_PROPORTION + offset;
}

static int64_t
last_base0_auction_id(int64_t event_id)
{
	int64_t		epoch = event_id / TOTAL_PROPORTION;
	int64_t		offset = event_id % TOTAL_PROPORTION;

	if (offset < PERSON_PROPORTION)
	{
		epoch--;
		offset = AUCTION_PROPORTION - 1;
	}
	else if (offset >= PERSON_PROPORTION + AUCTION_PROPORTION)
		offset = AUCTION_PROPORTION - 1;
	else
		offset -= PERSON_PROPORTION;
	return epoch * AUCTION_PROPORTION + offset;
}

/* one of the active people, or of the few not created yet */
static int64_t
next_base0_person_id(int64_t event_id)
{
	int64_t		num_people = last_base0_person_id(event_id) + 1;
	int64_t		active = num_people < NUM_ACTIVE_PEOPLE ? num_people : NUM_ACTIVE_PEOPLE;

	return num_people - active + next_below(active + ID_LEAD);
}

/* one of the auctions likely still open, or of the few not created yet */
static int64_t
next_base0_auction_id(int64_t event_id)
{
	int64_t		max_auction = last_base0_auction_id(event_id);
	int64_t		min_auction = max_auction - NUM_IN_FLIGHT_AUCTIONS > 0 ? max_auction - NUM_IN_FLIGHT_AUCTIONS : 0;

	return min_auction + next_below(max_auction - min_auction + 1 + ID_LEAD);
}

static int64_t
next_price(void)
{
	return llround(pow(10.0, next_double() * 6.0) * 100.0);
}

/* ---- strings ------------------------------------------------------------ */

/* up to max_len - 1 letters (at least 3 before trimming), a space (or special) one time in 13 */
static int
next_string(char *out, int max_len, char special)
{
	int			len = 3 + (int) next_below(max_len - 3);
	int			n = 0;

	for (int i = 0; i < len; i++)
		out[n++] = next_below(13) == 0 ? special : (char) ('a' + next_below(26));
	out[n] = '\0';
	if (special == ' ')
	{
		/* trimmed, as Java's trim() */
		int			start = 0;

		while (n > 0 && out[n - 1] == ' ')
			out[--n] = '\0';
		while (out[start] == ' ')
			start++;
		if (start > 0)
		{
			memmove(out, out + start, n - start + 1);
			n -= start;
		}
	}
	return n;
}

/* padding so that current + its length is desired on average */
static int
next_extra(char *out, int current, int desired)
{
	int			delta;
	int			size;

	if (current > desired)
	{
		out[0] = '\0';
		return 0;
	}
	desired -= current;
	delta = (int) lround(desired * 0.2);
	size = desired - delta + (delta == 0 ? 0 : (int) next_below(2 * delta));
	for (int i = 0; i < size; i++)
		out[i] = (char) ('a' + next_below(26));
	out[size] = '\0';
	return size;
}

static void
format_time(char *out, int64_t ms)
{
	time_t		s = (time_t) (ms / 1000);
	struct tm	tm;

	gmtime_r(&s, &tm);
	sprintf(out, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
			tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int) (ms % 1000));
}

/* ---- channels ----------------------------------------------------------- */

static const char *const hot_channels[] = {"Google", "Facebook", "Baidu", "Apple"};
static char hot_urls[4][96];
static char *channel_urls[NUM_CHANNELS];

static void
base_url(char *out)
{
	char		a[8],
				b[8],
				c[8];

	next_string(a, 5, '_');
	next_string(b, 5, '_');
	next_string(c, 5, '_');
	sprintf(out, "https://www.nexmark.com/%s/%s/%s/item.htm?query=1", a, b, c);
}

static uint32_t
reverse_bits(uint32_t v)
{
	uint32_t	r = 0;

	for (int i = 0; i < 32; i++, v >>= 1)
		r = (r << 1) | (v & 1);
	return r;
}

static const char *
channel_url(int n)
{
	if (channel_urls[n] == NULL)
	{
		char		url[128];

		base_url(url);
		if (next_below(10) > 0)
		{
			int64_t		rev = (int32_t) reverse_bits((uint32_t) n);

			sprintf(url + strlen(url), "&channel_id=%" PRId64, rev < 0 ? -rev : rev);
		}
		channel_urls[n] = strdup(url);
	}
	return channel_urls[n];
}

/* ---- events ------------------------------------------------------------- */

/*
 * What q3 and q8 must find, from what was generated: each person's state
 * and 10-second window, each auction's seller, category and window
 * (indexed by base-0 id).
 */
static int *person_state;
static int64_t *person_window;
static int64_t *auction_seller;
static int *auction_category;
static int64_t *auction_window;

static const char *const states[] = {"AZ", "CA", "ID", "OR", "WA", "WY"};
static const char *const cities[] = {"Phoenix", "Los Angeles", "San Francisco", "Boise", "Portland",
"Bend", "Redmond", "Seattle", "Kent", "Cheyenne"};
static const char *const first_names[] = {"Peter", "Paul", "Luke", "John", "Saul", "Vicky", "Kate",
"Julie", "Sarah", "Deiter", "Walter"};
static const char *const last_names[] = {"Shultz", "Abrams", "Spencer", "White", "Bartels", "Walton",
"Smith", "Jones", "Noris"};

#define PICK(a) (a[next_below(sizeof(a) / sizeof(a[0]))])

static void
person(FILE *f, int64_t event_id, int64_t ts)
{
	char		name[32],
				email[32],
				user[8],
				domain[8],
				card[24],
				extra[256],
				t[32];
	const char *city = NULL;
	const char *state = NULL;
	int			size;

	snprintf(name, sizeof(name), "%s %s", PICK(first_names), PICK(last_names));
	next_string(user, 7, ' ');
	next_string(domain, 5, ' ');
	snprintf(email, sizeof(email), "%s@%s.com", user, domain);
	snprintf(card, sizeof(card), "%04d %04d %04d %04d", (int) next_below(10000), (int) next_below(10000),
			 (int) next_below(10000), (int) next_below(10000));
	city = PICK(cities);
	{
		int			si = (int) next_below(sizeof(states) / sizeof(states[0]));

		state = states[si];
		person_state[last_base0_person_id(event_id)] = si;
		person_window[last_base0_person_id(event_id)] = ts / 10000;
	}
	size = 8 + (int) (strlen(name) + strlen(email) + strlen(card) + strlen(city) + strlen(state));
	next_extra(extra, size, AVG_PERSON_BYTES);
	format_time(t, ts);
	fprintf(f, "{\"id\":%" PRId64 ",\"name\":\"%s\",\"email_address\":\"%s\",\"credit_card\":\"%s\","
			"\"city\":\"%s\",\"state\":\"%s\",\"date_time\":\"%s\",\"extra\":\"%s\"}\n",
			last_base0_person_id(event_id) + FIRST_PERSON_ID, name, email, card, city, state, t, extra);
}

static void
auction(FILE *f, int64_t event_id, int64_t ts, int64_t base_ms, double delay_us)
{
	int64_t		id = last_base0_auction_id(event_id) + FIRST_AUCTION_ID;
	int64_t		seller;
	int64_t		initial = next_price();
	int64_t		reserve;
	int64_t		horizon;
	int64_t		expires;
	int64_t		category;
	char		item[32],
				desc[128],
				extra[600],
				t[32],
				e[32];
	int			size;

	if (next_below(HOT_SELLERS_RATIO) > 0)
		seller = (last_base0_person_id(event_id) / HOT_GROUP) * HOT_GROUP;
	else
		seller = next_base0_person_id(event_id);
	seller += FIRST_PERSON_ID;
	/* on average until the auction NUM_IN_FLIGHT_AUCTIONS later is created */
	horizon = base_ms + (int64_t) ((event_id + (int64_t) NUM_IN_FLIGHT_AUCTIONS * TOTAL_PROPORTION / AUCTION_PROPORTION)
								   * delay_us) / 1000 - ts;
	expires = ts + 1 + next_below(horizon * 2 > 1 ? horizon * 2 : 1);
	next_string(item, 20, ' ');
	next_string(desc, 100, ' ');
	reserve = initial + next_price();
	category = FIRST_CATEGORY_ID + next_below(NUM_CATEGORIES);
	auction_seller[id - FIRST_AUCTION_ID] = seller - FIRST_PERSON_ID;
	auction_category[id - FIRST_AUCTION_ID] = (int) category;
	auction_window[id - FIRST_AUCTION_ID] = ts / 10000;
	size = 8 + (int) (strlen(item) + strlen(desc)) + 8 + 8 + 8 + 8 + 8;
	next_extra(extra, size, AVG_AUCTION_BYTES);
	format_time(t, ts);
	format_time(e, expires);
	fprintf(f, "{\"id\":%" PRId64 ",\"item_name\":\"%s\",\"description\":\"%s\",\"initial_bid\":%" PRId64
			",\"reserve\":%" PRId64 ",\"date_time\":\"%s\",\"expires\":\"%s\",\"seller\":%" PRId64
			",\"category\":%" PRId64 ",\"extra\":\"%s\"}\n",
			id, item, desc, initial, reserve, t, e, seller, category, extra);
}

/* returns the bid's auction id */
static int64_t
bid(FILE *f, int64_t event_id, int64_t ts)
{
	int64_t		auction_id;
	int64_t		bidder;
	int64_t		price;
	const char *channel;
	const char *url;
	char		chan[24],
				extra[128],
				t[32];

	if (next_below(HOT_AUCTION_RATIO) > 0)
		auction_id = (last_base0_auction_id(event_id) / HOT_GROUP) * HOT_GROUP;
	else
		auction_id = next_base0_auction_id(event_id);
	auction_id += FIRST_AUCTION_ID;
	if (next_below(HOT_BIDDERS_RATIO) > 0)
		bidder = (last_base0_person_id(event_id) / HOT_GROUP) * HOT_GROUP + 1;
	else
		bidder = next_base0_person_id(event_id);
	bidder += FIRST_PERSON_ID;
	price = next_price();
	if (next_below(HOT_CHANNELS_RATIO) > 0)
	{
		int			i = (int) next_below(4);

		channel = hot_channels[i];
		url = hot_urls[i];
	}
	else
	{
		int			n = (int) next_below(NUM_CHANNELS);

		snprintf(chan, sizeof(chan), "channel-%d", n);
		channel = chan;
		url = channel_url(n);
	}
	next_extra(extra, 8 + 8 + 8 + 8, AVG_BID_BYTES);
	format_time(t, ts);
	fprintf(f, "{\"auction\":%" PRId64 ",\"bidder\":%" PRId64 ",\"price\":%" PRId64
			",\"channel\":\"%s\",\"url\":\"%s\",\"date_time\":\"%s\",\"extra\":\"%s\"}\n",
			auction_id, bidder, price, channel, url, t, extra);
	return auction_id;
}

static FILE *
open_out(const char *dir, const char *name)
{
	char		path[4096];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	if (f == NULL)
	{
		perror(path);
		exit(1);
	}
	setvbuf(f, NULL, _IOFBF, 1 << 20);
	return f;
}

int
main(int argc, char **argv)
{
	int64_t		events;
	double		rate;
	int64_t		base_ms;
	FILE	   *fp,
			   *fa,
			   *fb;
	int64_t		persons = 0,
				auctions = 0,
				bids = 0,
				q2 = 0,
				q3 = 0,
				q8 = 0;
	double		delay_us;

	if (argc != 6)
	{
		fprintf(stderr, "usage: generate EVENTS RATE BASE_MS SEED OUTDIR\n");
		return 2;
	}
	events = strtoll(argv[1], NULL, 10);
	rate = strtod(argv[2], NULL);
	base_ms = strtoll(argv[3], NULL, 10);
	rng_state = strtoull(argv[4], NULL, 10);
	if (events <= 0 || rate <= 0)
	{
		fprintf(stderr, "generate: EVENTS and RATE must be greater than zero\n");
		return 2;
	}
	delay_us = 1000000.0 / rate;
	{
		size_t		n = (size_t) (events / TOTAL_PROPORTION + 1) * AUCTION_PROPORTION;

		person_state = calloc(n, sizeof(int));
		person_window = calloc(n, sizeof(int64_t));
		auction_seller = calloc(n, sizeof(int64_t));
		auction_category = calloc(n, sizeof(int));
		auction_window = calloc(n, sizeof(int64_t));
		if (!person_state || !person_window || !auction_seller || !auction_category || !auction_window)
		{
			perror("generate");
			return 1;
		}
	}
	for (int i = 0; i < 4; i++)
		base_url(hot_urls[i]);
	fp = open_out(argv[5], "person.jsonl");
	fa = open_out(argv[5], "auction.jsonl");
	fb = open_out(argv[5], "bid.jsonl");
	for (int64_t n = 0; n < events; n++)
	{
		int64_t		ts = base_ms + (int64_t) (n * delay_us) / 1000;
		int64_t		rem = n % TOTAL_PROPORTION;

		if (rem < PERSON_PROPORTION)
		{
			person(fp, n, ts);
			persons++;
		}
		else if (rem < PERSON_PROPORTION + AUCTION_PROPORTION)
		{
			auction(fa, n, ts, base_ms, delay_us);
			auctions++;
		}
		else
		{
			if (bid(fb, n, ts) % 123 == 0)
				q2++;
			bids++;
		}
	}
	if (fclose(fp) != 0 || fclose(fa) != 0 || fclose(fb) != 0)
	{
		perror("generate");
		return 1;
	}
	/*
	 * q3: auctions of category 10 whose seller is a person of OR, ID or
	 * CA (a seller not created yet never matches); q8: the persons with an
	 * auction of theirs in their own 10-second window
	 */
	{
		char	   *seen = calloc((size_t) persons + 1, 1);

		for (int64_t a = 0; a < auctions; a++)
		{
			int64_t		p = auction_seller[a];

			if (p >= persons)
				continue;
			if (auction_category[a] == 10 && (person_state[p] == 1 || person_state[p] == 2 || person_state[p] == 3))
				q3++;
			if (auction_window[a] == person_window[p] && !seen[p])
			{
				seen[p] = 1;
				q8++;
			}
		}
		free(seen);
	}
	printf("%" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 " %" PRId64 "\n",
		   persons, auctions, bids, q2, q3, q8);
	return 0;
}
