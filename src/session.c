/*
 * session.c: the session windows of one group.
 *
 * A batch keeps, per group, the sessions its rows form: sorted by start,
 * none overlapping or touching another.  A row's interval [ts, ts + gap)
 * joins every session it overlaps or touches, which merges them into one
 * (their aggregate states combined with the aggregates' combine
 * functions).  At the end of the batch the stored sessions of the group
 * that the batch's sessions reach are added the same way, so a session of
 * the batch may absorb stored sessions, whose rows then have to go
 * (aggstate.c).  Rows of a group mostly come in event-time order, so the
 * search starts at the last session.
 */
#include "postgres.h"

#include "session.h"

/*
 * The sessions that [start, end) overlaps or touches: items[*first ..
 * *last].  Returns false when there are none; *pos is then where a new
 * session goes.
 */
static bool
touching(StmSessionList *list, TimestampTz start, TimestampTz end,
		 int *first, int *last, int *pos)
{
	int			i;

	*first = *last = -1;
	/* sorted by start and disjoint: the ends are sorted too */
	for (i = list->n - 1; i >= 0; i--)
	{
		StmSession *s = &list->items[i];

		if (s->end < start)
			break;
		if (s->start <= end)
		{
			if (*last < 0)
				*last = i;
			*first = i;
		}
	}
	if (*first >= 0)
		return true;
	/* after every session that starts before it */
	for (*pos = list->n; *pos > 0 && list->items[*pos - 1].start > start; (*pos)--)
		;
	return false;
}

/* A new session at pos. */
static StmSession *
insert_at(StmSessionList *list, int pos, TimestampTz start, TimestampTz end)
{
	StmSession *s;

	if (list->n == list->cap)
	{
		list->cap = list->cap ? list->cap * 2 : 4;
		list->items = list->items ?
			repalloc(list->items, sizeof(StmSession) * list->cap) :
			palloc(sizeof(StmSession) * list->cap);
	}
	memmove(&list->items[pos + 1], &list->items[pos], sizeof(StmSession) * (list->n - pos));
	list->n++;
	s = &list->items[pos];
	memset(s, 0, sizeof(StmSession));
	s->start = start;
	s->end = end;
	return s;
}

/* items[first .. last] become one session, items[first], that also covers [start, end). */
static StmSession *
merge_range(StmSessionList *list, int first, int last, TimestampTz start, TimestampTz end,
			StmAggRuntime *rt)
{
	StmSession *into = &list->items[first];

	for (int i = first + 1; i <= last; i++)
	{
		StmSession *s = &list->items[i];

		if (into->vals)
			for (int a = 0; a < rt->naggs; a++)
				stm_agg_combine(rt, a, &into->vals[a], &s->vals[a]);
		into->from_batch |= s->from_batch;
		into->stored = list_concat(into->stored, s->stored);
	}
	into->start = Min(into->start, start);
	into->end = Max(list->items[last].end, end);
	memmove(&list->items[first + 1], &list->items[last + 1],
			sizeof(StmSession) * (list->n - last - 1));
	list->n -= last - first;
	return into;
}

/*
 * A row's interval [start, end): returns the session it now belongs to,
 * whose states the caller advances with the row.  With rt NULL no states
 * are kept (late rows, which are only counted).
 */
StmSession *
stm_session_add_row(StmSessionList *list, TimestampTz start, TimestampTz end,
					StmAggRuntime *rt)
{
	int			first;
	int			last;
	int			pos;
	StmSession *s;

	if (touching(list, start, end, &first, &last, &pos))
		s = merge_range(list, first, last, start, end, rt);
	else
	{
		s = insert_at(list, pos, start, end);
		if (rt)
		{
			s->vals = palloc(sizeof(StmAggValue) * Max(rt->naggs, 1));
			stm_agg_group_init(rt, s->vals);
		}
	}
	s->from_batch = true;
	return s;
}

/* A stored session (its states loaded into vals) joins the sessions it reaches. */
void
stm_session_add_stored(StmSessionList *list, TimestampTz start, TimestampTz end,
					   StmAggValue *vals, bytea *key, StmAggRuntime *rt)
{
	StmStoredSession *ref = palloc(sizeof(StmStoredSession));
	int			first;
	int			last;
	int			pos;
	StmSession *s;

	ref->key = key;
	ref->start = start;
	if (touching(list, start, end, &first, &last, &pos))
	{
		s = merge_range(list, first, last, start, end, rt);
		for (int a = 0; a < rt->naggs; a++)
			stm_agg_combine(rt, a, &s->vals[a], &vals[a]);
	}
	else
	{
		s = insert_at(list, pos, start, end);
		s->vals = vals;
	}
	s->stored = lappend(s->stored, ref);
}
