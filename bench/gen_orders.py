#!/usr/bin/env python3
"""bench/gen_orders.py [options] N JSONL CSV: N order records, the same ones twice.

JSONL gets one JSON object per line (what is produced to Kafka), CSV the
same records as order_id,user_id,amount,status,event_time (what the COPY
baseline loads).  Records look like

  {"order_id":1,"user_id":48113,"amount":123.45,"status":"paid","event_time":"2026-11-29T10:11:12.345Z"}

(about 110 bytes).  Values are pseudo-random with a fixed seed, so every run
loads the same data.  Prints "records json_bytes avg_record_len sum_amount"
on stdout so the caller can check what each method loaded (records counts
every line written, the sentinel too; sum_amount is that of the N orders).

By default record i's event time is 2026-11-29 plus i * 37 ms, wrapping at
midnight (in order up to ~2.3M records; what the stateless benchmark uses).

Options (for the aggregate benchmark):
  --in-order      event time = 2026-11-29T00:00:00Z + i * --step-ms + a
                  pseudo-random jitter in [0, --jitter-ms), never wrapping:
                  in order except for the jitter, so a watermark delay larger
                  than the jitter makes no row late
  --step-ms MS    (default 37: about 10 hours of event time per 1M records)
  --jitter-ms MS  (default 120000: 2 minutes)
  --sentinel      one more record after the N orders, order_id N+1, amount
                  0.00, status "paid", its event time one day after the last
                  order's: it moves a stream's watermark past every window of
                  the orders, so all of them close

Option (for the join benchmark):
  --users K       user_id in 1..K (uniform) instead of 100000..999999, so
                  that every order finds its user in a table of users 1..K:
                  user_id = (the default's user_id - 100000) mod K + 1, the
                  other values as without it (the sentinel's user_id is 1)
"""
import argparse
import random
import time


def iso_ms(ms):
    """ISO 8601 UTC text of a Unix time in milliseconds."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


def main():
    ap = argparse.ArgumentParser(usage="gen_orders.py [options] N JSONL CSV")
    ap.add_argument("n", type=int)
    ap.add_argument("jsonl")
    ap.add_argument("csv")
    ap.add_argument("--in-order", action="store_true")
    ap.add_argument("--step-ms", type=int, default=37)
    ap.add_argument("--jitter-ms", type=int, default=120000)
    ap.add_argument("--sentinel", action="store_true")
    ap.add_argument("--users", type=int, default=0)
    args = ap.parse_args()
    n = args.n
    if args.users < 0:
        ap.error("--users wants a positive integer")
    rnd = random.Random(42)
    jit = random.Random(4242)   # its own sequence: the other values stay as without --in-order
    start_ms = 1795910400000    # 2026-11-29T00:00:00Z
    statuses = ["created", "paid", "paid", "paid", "shipped", "cancelled"]
    total_cents = 0
    nbytes = 0
    lines = 0
    last_ms = start_ms
    chunk = 100000
    with open(args.jsonl, "w") as fj, open(args.csv, "w") as fc:
        for lo in range(1, n + 1, chunk):
            jl = []
            cl = []
            for i in range(lo, min(lo + chunk, n + 1)):
                user = rnd.randint(100000, 999999)
                if args.users:
                    user = (user - 100000) % args.users + 1
                cents = rnd.randint(1000, 99999)
                total_cents += cents
                amount = "%d.%02d" % (cents // 100, cents % 100)
                status = statuses[rnd.randrange(6)]
                if args.in_order:
                    ms = start_ms + i * args.step_ms + (jit.randrange(args.jitter_ms) if args.jitter_ms > 0 else 0)
                    last_ms = max(last_ms, ms)
                    ts = iso_ms(ms)
                else:
                    ms = i * 37  # ~10 hours of event time over 1M records
                    ts = "2026-11-29T%02d:%02d:%02d.%03dZ" % (
                        ms // 3600000 % 24, ms // 60000 % 60, ms // 1000 % 60, ms % 1000)
                jl.append('{"order_id":%d,"user_id":%d,"amount":%s,"status":"%s","event_time":"%s"}\n'
                          % (i, user, amount, status, ts))
                cl.append("%d,%d,%s,%s,%s\n" % (i, user, amount, status, ts))
            s = "".join(jl)
            nbytes += len(s)
            lines += len(jl)
            fj.write(s)
            fc.write("".join(cl))
        if args.sentinel:
            if not args.in_order:
                last_ms = start_ms + 86400000  # the default times stay within 2026-11-29
            ts = iso_ms(last_ms + 86400000)
            su = 1 if args.users else 0
            s = '{"order_id":%d,"user_id":%d,"amount":0.00,"status":"paid","event_time":"%s"}\n' % (n + 1, su, ts)
            fj.write(s)
            fc.write("%d,%d,0.00,paid,%s\n" % (n + 1, su, ts))
            nbytes += len(s)
            lines += 1
    print(lines, nbytes, "%.1f" % ((nbytes - lines) / lines if lines else 0),
          "%d.%02d" % (total_cents // 100, total_cents % 100))


if __name__ == "__main__":
    main()
