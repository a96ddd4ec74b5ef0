/*
 * rfc3339.c: timestamptz and timestamp values in the exact RFC 3339 form,
 * converted without PostgreSQL's general date parser.
 *
 * The form (fixed width but for the fraction):
 *
 *     YYYY-MM-DD<sep>HH:MM:SS[.F{1,6}]<zone>
 *     <sep>  = T | t | space
 *     <zone> = Z | z | +HH:MM | -HH:MM   (timestamp: also nothing)
 *
 * Within it, a value is taken only where timestamptz_in (timestamp_in)
 * gives a value for sure: year 0001..9999, a real day of the month
 * (proleptic Gregorian leap years, as PostgreSQL's day_tab), hours 00..23,
 * minutes and seconds 00..59, offsets up to 15:59 (MAX_TZDISP_HOUR).  The
 * value is then computed as timestamptz_in does it: PostgreSQL's own
 * tm2timestamp (date2j, the offset as DecodeTimezone gives it), and
 * AdjustTimestampForTypmod for a column with a precision.  Fractions of up
 * to 6 digits are exact microseconds, which is what rint(strtod() * 1e6) in
 * ParseFractionalSecond gives for them; 7 digits and more are rounded in
 * binary floating point there, so they are not taken here.
 *
 * Everything else returns false and the caller calls the type's input
 * function: other forms, whitespace, 24:00:00, leap seconds (:60), more than
 * 6 fraction digits, years outside 4 digits or 0000, Feb 30, offsets of 16
 * hours or more, and any string after the value.  So values and errors stay
 * PostgreSQL's.
 *
 * What else timestamptz_in depends on: the session's TimeZone only for a
 * value without an offset, which timestamptz never takes here; DateStyle not
 * at all with a 4-digit year first.  timezone_abbreviations: the letters T
 * and Z are read as time zone abbreviations first when the session's set
 * defines them, and Z is only an abbreviation (the Default set has "Z 0";
 * a set without it makes Z an error), so a value is taken only while "t" is
 * no abbreviation and "z" one of offset 0 (DecodeTimezoneAbbrev, the
 * parser's own lookup).
 *
 * test_timestamp_fast_path (test builds only, `make FAULT_INJECTION=1`)
 * compares these functions with timestamptz_in and timestamp_in over
 * generated values (sql/timestamp_fast_path.sql).
 */
#include "postgres.h"

#include "utils/datetime.h"
#include "utils/timestamp.h"

#include "rfc3339.h"

/* One value of the form, as DecodeDateTime would have filled it. */
typedef struct Rfc3339
{
	struct pg_tm tm;
	fsec_t		fsec;
	int			tz;				/* seconds west of UTC (DecodeTimezone's sign) */
	char		sep;			/* 'T', 't' or ' ' */
	char		zone;			/* 'Z', 'z', '+', '-', or '\0': none */
} Rfc3339;

#define IS_DIGIT(c) ((c) >= '0' && (c) <= '9')

/* two digits at s (s[0] is read first: it may be the terminator) */
static inline bool
two_digits(const char *s, int *value)
{
	if (!IS_DIGIT(s[0]) || !IS_DIGIT(s[1]))
		return false;
	*value = (s[0] - '0') * 10 + (s[1] - '0');
	return true;
}

/*
 * The fields of str, true when str is exactly of the form with values that
 * are surely valid.  Each character is read only after the one before it
 * was found to be something else than the terminator.
 */
static bool
parse_rfc3339(const char *str, Rfc3339 *r)
{
	struct pg_tm *tm = &r->tm;
	const char *p;
	int			century;
	int			year;

	if (!two_digits(str, &century) || !two_digits(str + 2, &year) || str[4] != '-' ||
		!two_digits(str + 5, &tm->tm_mon) || str[7] != '-' ||
		!two_digits(str + 8, &tm->tm_mday) ||
		(str[10] != 'T' && str[10] != 't' && str[10] != ' ') ||
		!two_digits(str + 11, &tm->tm_hour) || str[13] != ':' ||
		!two_digits(str + 14, &tm->tm_min) || str[16] != ':' ||
		!two_digits(str + 17, &tm->tm_sec))
		return false;
	tm->tm_year = century * 100 + year;
	r->sep = str[10];
	/* what ValidateDate and DecodeTime accept, less 24:00:00 and :60 */
	if (tm->tm_year < 1 || tm->tm_mon < 1 || tm->tm_mon > MONTHS_PER_YEAR ||
		tm->tm_mday < 1 || tm->tm_mday > day_tab[isleap(tm->tm_year)][tm->tm_mon - 1] ||
		tm->tm_hour >= HOURS_PER_DAY || tm->tm_min >= MINS_PER_HOUR ||
		tm->tm_sec >= SECS_PER_MINUTE)
		return false;

	p = str + 19;
	r->fsec = 0;
	if (*p == '.')
	{
		int			n = 0;

		p++;
		while (IS_DIGIT(*p) && n <= 6)
		{
			r->fsec = r->fsec * 10 + (*p++ - '0');
			n++;
		}
		if (n == 0 || n > 6)
			return false;
		for (; n < 6; n++)
			r->fsec *= 10;
	}

	r->zone = *p;
	r->tz = 0;
	if (*p == 'Z' || *p == 'z')
		p++;
	else if (*p == '+' || *p == '-')
	{
		int			hours;
		int			minutes;

		if (!two_digits(p + 1, &hours) || p[3] != ':' || !two_digits(p + 4, &minutes) ||
			hours > MAX_TZDISP_HOUR || minutes >= MINS_PER_HOUR)
			return false;
		r->tz = (hours * MINS_PER_HOUR + minutes) * SECS_PER_MINUTE;
		if (*p == '+')
			r->tz = -r->tz;
		p += 6;
	}
	return *p == '\0';
}

/*
 * The session's time zone abbreviations read "t" as the built-in token (the
 * ISO "T" before a time: it must be no abbreviation, which DecodeDateTime
 * looks up first) and "z" as offset 0 (Z is no built-in token: without an
 * abbreviation "Z 0", as in the Default set, timestamptz_in rejects it).
 */
static bool
abbreviations_agree(const Rfc3339 *r)
{
	static char t[] = "t";
	static char z[] = "z";
	int			offset;
	pg_tz	   *tz;
	int			type;

	if (r->sep != ' ' && DecodeTimezoneAbbrev(1, t, &offset, &tz) != UNKNOWN_FIELD)
		return false;
	if (r->zone == 'Z' || r->zone == 'z')
	{
		type = DecodeTimezoneAbbrev(r->sep == ' ' ? 2 : 3, z, &offset, &tz);
		if (type != TZ || offset != 0)
			return false;
	}
	return true;
}

/*
 * str as timestamptz_in(str, typmod) gives it, when str is of the form with
 * an offset or Z; false: call timestamptz_in.
 */
bool
stm_rfc3339_timestamptz(const char *str, int32 typmod, TimestampTz *result)
{
	Rfc3339		r;

	if (!parse_rfc3339(str, &r) || r.zone == '\0' || !abbreviations_agree(&r) ||
		tm2timestamp(&r.tm, r.fsec, &r.tz, result) != 0)
		return false;
	AdjustTimestampForTypmod(result, typmod);
	return true;
}

/*
 * str as timestamp_in(str, typmod) gives it (which ignores an offset, and
 * does not depend on TimeZone), when str is of the form, with or without an
 * offset; false: call timestamp_in.
 */
bool
stm_rfc3339_timestamp(const char *str, int32 typmod, Timestamp *result)
{
	Rfc3339		r;

	if (!parse_rfc3339(str, &r) || !abbreviations_agree(&r) ||
		tm2timestamp(&r.tm, r.fsec, NULL, result) != 0)
		return false;
	AdjustTimestampForTypmod(result, typmod);
	return true;
}

#ifdef STM_FAULT_INJECTION

/* ---- the differential test (test builds only) ---------------------------- */

#include "common/pg_prng.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"

PG_FUNCTION_INFO_V1(streaming_test_timestamp_fast_path);

/* an integer in [lo, hi] */
static int
rnd(pg_prng_state *s, int lo, int hi)
{
	return lo + (int) pg_prng_uint64_range(s, 0, hi - lo);
}

/* true with probability percent / 100 */
static bool
chance(pg_prng_state *s, int percent)
{
	return pg_prng_uint64_range(s, 0, 99) < (uint64) percent;
}

static const int powers_of_ten[] = {1, 10, 100, 1000, 10000, 100000, 1000000};

static const int edge_years[] = {
	1, 2, 3, 4, 99, 100, 101, 400, 999, 1000, 1582, 1600, 1700, 1800, 1899,
	1900, 1970, 1999, 2000, 2001, 2023, 2024, 2038, 2100, 2400, 8000, 9996,
	9998, 9999
};

/* a string of about the form: mostly valid, some fields out of range */
static void
generate_value(pg_prng_state *s, char *buf, int bufsize, int fraction)
{
	int			year;
	int			month;
	int			day;
	int			hour;
	int			minute;
	int			second;
	int			digits;
	char		sep;
	int			n;
	int			r;
	int			edge;

	r = rnd(s, 0, 99);
	if (r < 50)
		year = rnd(s, 1, 9999);
	else if (r < 97)
		year = edge_years[rnd(s, 0, lengthof(edge_years) - 1)];
	else if (r < 98)
		year = 0;
	else
		year = rnd(s, 10000, 300000);	/* 5 or 6 digits: timestamptz_in's range ends in 294276 */

	month = chance(s, 96) ? rnd(s, 1, 12) : (chance(s, 30) ? 0 : rnd(s, 13, 99));

	r = rnd(s, 0, 99);
	if (r < 35 && month >= 1 && month <= 12)
	{
		/* month ends: the last day, the one before, the one after (Feb 29, 30) */
		day = day_tab[isleap(year)][month - 1] + rnd(s, -1, 1);
		if (month == 2 && chance(s, 50))
			day = 29;
	}
	else if (r < 97)
		day = rnd(s, 1, 31);
	else
		day = chance(s, 30) ? 0 : rnd(s, 32, 99);

	hour = chance(s, 96) ? rnd(s, 0, 23) : (chance(s, 50) ? 24 : rnd(s, 25, 99));
	minute = chance(s, 97) ? rnd(s, 0, 59) : rnd(s, 60, 99);
	second = chance(s, 96) ? rnd(s, 0, 59) : (chance(s, 60) ? 60 : rnd(s, 61, 99));
	if (hour == 24 && chance(s, 50))
		minute = second = 0;

	r = rnd(s, 0, 99);
	sep = r < 60 ? 'T' : r < 75 ? 't' : r < 96 ? ' ' : "_xX/-:\t"[rnd(s, 0, 6)];

	/* the range ends of the form */
	edge = rnd(s, 0, 199);
	if (edge == 0)
	{
		year = 9999, month = 12, day = 31;
		hour = 23, minute = 59, second = 59;
	}
	else if (edge == 1)
	{
		year = 1, month = 1, day = 1;
		hour = minute = second = 0;
	}

	n = snprintf(buf, bufsize, "%04d-%02d-%02d%c%02d:%02d:%02d",
				 year, month, day, sep, hour, minute, second);

	/* the fraction: 0-6 digits mostly, 7-9 (rounded by PostgreSQL) sometimes */
	if (fraction >= 0)
	{
		/* the exhaustive sweep: fraction is a number of 1..6 digits, encoded */
		digits = fraction / 1000000 + 1;
		n += snprintf(buf + n, bufsize - n, ".%0*d", digits, fraction % 1000000);
	}
	else
	{
		digits = chance(s, 93) ? rnd(s, 0, 6) : rnd(s, 7, 9);
		if (digits > 0 || chance(s, 1))
		{
			int			kind = rnd(s, 0, 9);

			buf[n++] = '.';
			for (int i = 0; i < digits; i++)
			{
				/* all nines, a five after nines, or random digits */
				if (kind == 0)
					buf[n++] = '9';
				else if (kind == 1)
					buf[n++] = i == digits - 1 ? '5' : (i < 6 ? '9' : '0');
				else if (kind == 2)
					buf[n++] = i == digits - 1 ? '5' : '0';
				else
					buf[n++] = '0' + rnd(s, 0, 9);
			}
			buf[n] = '\0';
		}
	}
	if (edge == 0 && fraction < 0 && digits == 0 && chance(s, 50))
		n = strlen(strcat(buf, ".999999"));

	/* the zone */
	r = rnd(s, 0, 99);
	if (r < 40)
		n += snprintf(buf + n, bufsize - n, "%c%02d:%02d", chance(s, 50) ? '+' : '-',
					  rnd(s, 0, 15), rnd(s, 0, 59));
	else if (r < 48)
		n += snprintf(buf + n, bufsize - n, "%c15:59", chance(s, 50) ? '+' : '-');
	else if (r < 52)
		n += snprintf(buf + n, bufsize - n, "%c00:00", chance(s, 50) ? '+' : '-');
	else if (r < 72)
		n += snprintf(buf + n, bufsize - n, "Z");
	else if (r < 77)
		n += snprintf(buf + n, bufsize - n, "z");
	else if (r < 90)
		;						/* none */
	else
	{
		static const char *const bad_zones[] = {
			"+16:00", "-16:00", "+99:59", "+05:60", "-00:99", "+05", "-0530",
			"+05:3", "+5:30", "+05:30:00", "-05:30:59", " +05:30", "UTC", "+05:30Z",
			"Zz", "+05.30", "+05:30 ", "GMT+1", "EST", "-", "+"
		};

		n += snprintf(buf + n, bufsize - n, "%s", bad_zones[rnd(s, 0, lengthof(bad_zones) - 1)]);
	}

	/* near misses: one character deleted, doubled, replaced; junk around */
	if (chance(s, 15) && n > 1)
	{
		static const char chars[] = "0123456789-:.+ TtZz\txX/";
		int			at = rnd(s, 0, n - 1);

		switch (rnd(s, 0, 5))
		{
			case 0:
				memmove(buf + at, buf + at + 1, n - at);
				break;
			case 1:
				if (n + 2 < bufsize)
					memmove(buf + at + 1, buf + at, n - at + 1);
				break;
			case 2:
				buf[at] = chars[rnd(s, 0, sizeof(chars) - 2)];
				break;
			case 3:
				if (n + 2 < bufsize)
				{
					memmove(buf + 1, buf, n + 1);
					buf[0] = chance(s, 50) ? ' ' : '\n';
				}
				break;
			case 4:
				if (n + 2 < bufsize)
				{
					buf[n] = chars[rnd(s, 0, sizeof(chars) - 2)];
					buf[n + 1] = '\0';
				}
				break;
			case 5:
				buf[at] = '\0';
				break;
		}
	}
}

/*
 * infunc(str, typmod) into *result; false if it raised an error of class
 * 22 (data exception: what bad input raises).  The input functions of
 * timestamps take no locks and hold no resources, so catching their errors
 * without a subtransaction is safe here (test code only).
 */
static bool
reference_input(PGFunction infunc, const char *str, int32 typmod, int64 *result)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = false;

	PG_TRY();
	{
		*result = DatumGetInt64(DirectFunctionCall3(infunc, CStringGetDatum(str),
													ObjectIdGetDatum(InvalidOid),
													Int32GetDatum(typmod)));
		ok = true;
	}
	PG_CATCH();
	{
		if (ERRCODE_TO_CATEGORY(geterrcode()) != ERRCODE_DATA_EXCEPTION)
			PG_RE_THROW();
		MemoryContextSwitchTo(cxt);
		FlushErrorState();
	}
	PG_END_TRY();
	return ok;
}

typedef struct Tally
{
	int64		accepted;		/* taken by the fast path (and equal) */
	int64		refused_valid;	/* refused, and the input function took it */
	int64		refused_invalid;	/* refused, and the input function raised */
	int64		mismatches;
} Tally;

static int64 reported;

/* one value, one type: the fast path against the input function */
static void
compare_one(const char *type, const char *str, int32 typmod, bool fast_ok, int64 fast,
			PGFunction infunc, Tally *t)
{
	int64		ref = 0;
	bool		ref_ok = reference_input(infunc, str, typmod, &ref);

	if (!fast_ok)
	{
		if (ref_ok)
			t->refused_valid++;
		else
			t->refused_invalid++;
		return;
	}
	if (ref_ok && ref == fast)
	{
		t->accepted++;
		return;
	}
	t->mismatches++;
	if (reported++ < 10)
		ereport(WARNING,
				(errmsg("%s fast path mismatch for \"%s\" (typmod %d)", type, str, typmod),
				 errdetail("The fast path gave " INT64_FORMAT ", the input function %s.",
						   fast, ref_ok ? psprintf(INT64_FORMAT, ref) : "an error")));
}

/* one string through both types */
static void
check_value(const char *str, int32 typmod, Tally *tz, Tally *ts)
{
	TimestampTz tzv = 0;
	Timestamp	tsv = 0;
	bool		ok;

	ok = stm_rfc3339_timestamptz(str, typmod, &tzv);
	compare_one("timestamptz", str, typmod, ok, tzv, timestamptz_in, tz);
	ok = stm_rfc3339_timestamp(str, typmod, &tsv);
	compare_one("timestamp", str, typmod, ok, tsv, timestamp_in, ts);
}

/*
 * test_timestamp_fast_path(n, seed, all_fractions): n generated strings
 * (and first, with all_fractions, every fraction of 1 to 6 digits, each
 * with a generated date, time and zone) through the fast paths and through
 * timestamptz_in and timestamp_in, in the session's TimeZone and
 * timezone_abbreviations.  A NOTICE counts what the fast paths took and
 * refused; the first mismatches are WARNINGs; returns the mismatches.
 */
Datum
streaming_test_timestamp_fast_path(PG_FUNCTION_ARGS)
{
	int64		n = PG_GETARG_INT64(0);
	int64		seed = PG_GETARG_INT64(1);
	bool		all_fractions = PG_GETARG_BOOL(2);
	pg_prng_state s;
	Tally		tz = {0};
	Tally		ts = {0};
	char		buf[64];
	int64		total = 0;

	pg_prng_seed(&s, (uint64) seed);
	reported = 0;
	for (int64 f = 0; all_fractions && f < 6000000; f++)
	{
		int			digits = f / 1000000 + 1;

		/* the values of that many digits: 10, 100, ..., 1000000 */
		if (f % 1000000 >= powers_of_ten[digits])
			continue;
		if ((f & 0xffff) == 0)
			CHECK_FOR_INTERRUPTS();
		generate_value(&s, buf, sizeof(buf), (int) f);
		check_value(buf, -1, &tz, &ts);
		total++;
	}
	for (int64 i = 0; i < n; i++)
	{
		int32		typmod = chance(&s, 12) ? rnd(&s, 0, 6) : -1;

		if ((i & 0xffff) == 0)
			CHECK_FOR_INTERRUPTS();
		generate_value(&s, buf, sizeof(buf), -1);
		check_value(buf, typmod, &tz, &ts);
		total++;
	}
	ereport(NOTICE,
			(errmsg(INT64_FORMAT " values: timestamptz " INT64_FORMAT " taken, "
					INT64_FORMAT " refused (" INT64_FORMAT " valid), timestamp "
					INT64_FORMAT " taken, " INT64_FORMAT " refused (" INT64_FORMAT
					" valid), " INT64_FORMAT " mismatches",
					total, tz.accepted, tz.refused_valid + tz.refused_invalid,
					tz.refused_valid, ts.accepted, ts.refused_valid + ts.refused_invalid,
					ts.refused_valid, tz.mismatches + ts.mismatches)));
	PG_RETURN_INT64(tz.mismatches + ts.mismatches);
}

#endif							/* STM_FAULT_INJECTION */
