#!/usr/bin/env python3
"""bench/gen_joins.py [options] N DIR: N orders and N payments for bench/joins.sh.

Writes into DIR:
  orders.jsonl    {"order_id":1,"user_id":48113,"amount":123.45,"order_time":"2026-11-29T00:00:00.086Z"}
  payments.jsonl  {"payment_id":1,"order_id":1,"amount":123.45,"payment_time":"2026-11-29T00:12:03.101Z"}
  orders.csv, payments.csv   the same records (what the COPY baseline loads)
  end_orders.jsonl, end_payments.jsonl   one sentinel each (below), also
                  appended to the two CSV files

Order i's time is 2026-11-29T00:00:00Z + i * --step-ms (in order).  5% of
the orders (--unpaid, chosen pseudo-randomly) have no payment; as many
others have two, so there are N payments too.  A payment comes 0 to 30
minutes (inclusive, in milliseconds) after its order; the payments are
written in payment-time order, payment_id in that order, so each topic is
in event-time order like a log.  Both files are the same on every run
(fixed seeds).

The sentinels: order N + 1 and its payment N + 1, one day after the last
order: produced after the data, they move both sides' watermarks past every
row, so the stream's no-data batch evicts all of them (and a left join
gives its NULL rows); they match each other, and the baseline loads them
too.

Prints "orders payments unpaid twice bytes": the data's counts (without the
sentinels), and the JSON bytes of both files.
"""
import argparse
import os
import random

from gen_orders import iso_ms

START_MS = 1795910400000    # 2026-11-29T00:00:00Z
WINDOW_MS = 30 * 60 * 1000


def write(dir, name, rows, json_fmt):
    """NAME.jsonl (json_fmt) and NAME.csv of rows (id, other id, cents, ms); returns the JSON bytes."""
    jl, cl = [], []
    for a, b, cents, ms in rows:
        amount = "%d.%02d" % (cents // 100, cents % 100)
        ts = iso_ms(ms)
        jl.append(json_fmt % (a, b, amount, ts))
        cl.append("%d,%d,%s,%s\n" % (a, b, amount, ts))
    s = "".join(jl)
    with open(os.path.join(dir, name + ".jsonl"), "w") as f:
        f.write(s)
    with open(os.path.join(dir, name + ".csv"), "w") as f:
        f.write("".join(cl))
    return len(s)


def main():
    ap = argparse.ArgumentParser(usage="gen_joins.py [options] N DIR")
    ap.add_argument("n", type=int)
    ap.add_argument("dir")
    ap.add_argument("--step-ms", type=int, default=86,
                    help="event time between orders (default 86: 1M orders over about a day)")
    ap.add_argument("--unpaid", type=float, default=0.05, help="share of orders without a payment")
    args = ap.parse_args()
    n = args.n
    rnd = random.Random(42)
    orders = []                 # (order_id, user_id, cents, ms)
    for i in range(1, n + 1):
        orders.append((i, rnd.randint(100000, 999999), rnd.randint(1000, 99999), START_MS + i * args.step_ms))
    # which orders are unpaid and which are paid twice: disjoint random sets
    ids = list(range(1, n + 1))
    rnd.shuffle(ids)
    k = int(n * args.unpaid)
    unpaid = set(ids[:k])
    twice = set(ids[k:2 * k])
    pays = []                   # (ms, order_id, cents)
    for oid, _, cents, ms in orders:
        if oid in unpaid:
            continue
        for _ in range(2 if oid in twice else 1):
            pays.append((ms + rnd.randint(0, WINDOW_MS), oid, cents))
    pays.sort()
    # (id, other id, cents, ms) rows of both files
    nbytes = write(args.dir, "orders", [(oid, user, cents, ms) for oid, user, cents, ms in orders],
                   '{"order_id":%d,"user_id":%d,"amount":%s,"order_time":"%s"}\n')
    nbytes += write(args.dir, "payments", [(pid, oid, cents, ms) for pid, (ms, oid, cents) in enumerate(pays, 1)],
                    '{"payment_id":%d,"order_id":%d,"amount":%s,"payment_time":"%s"}\n')
    # the sentinels, one day after the last order
    ms = orders[-1][3] + 86400000 if orders else START_MS
    ts = iso_ms(ms)
    with open(os.path.join(args.dir, "end_orders.jsonl"), "w") as f:
        f.write('{"order_id":%d,"user_id":1,"amount":0.00,"order_time":"%s"}\n' % (n + 1, ts))
    with open(os.path.join(args.dir, "end_payments.jsonl"), "w") as f:
        f.write('{"payment_id":%d,"order_id":%d,"amount":0.00,"payment_time":"%s"}\n' % (len(pays) + 1, n + 1, ts))
    with open(os.path.join(args.dir, "orders.csv"), "a") as f:
        f.write("%d,1,0.00,%s\n" % (n + 1, ts))
    with open(os.path.join(args.dir, "payments.csv"), "a") as f:
        f.write("%d,%d,0.00,%s\n" % (len(pays) + 1, n + 1, ts))
    print(n, len(pays), len(unpaid), len(twice), nbytes)


if __name__ == "__main__":
    main()
