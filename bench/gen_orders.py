#!/usr/bin/env python3
"""bench/gen_orders.py N JSONL CSV: N order records, the same ones twice.

JSONL gets one JSON object per line (what is produced to Kafka), CSV the
same records as order_id,user_id,amount,status,event_time (what the COPY
baseline loads).  Records look like

  {"order_id":1,"user_id":48113,"amount":123.45,"status":"paid","event_time":"2026-11-29T10:11:12.345Z"}

(about 110 bytes).  Values are pseudo-random with a fixed seed, so every run
loads the same data.  Prints "records json_bytes avg_record_len sum_amount"
on stdout so the caller can check what each method loaded.
"""
import random
import sys


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: gen_orders.py N JSONL CSV")
    n = int(sys.argv[1])
    rnd = random.Random(42)
    statuses = ["created", "paid", "paid", "paid", "shipped", "cancelled"]
    total_cents = 0
    nbytes = 0
    chunk = 100000
    with open(sys.argv[2], "w") as fj, open(sys.argv[3], "w") as fc:
        for lo in range(1, n + 1, chunk):
            jl = []
            cl = []
            for i in range(lo, min(lo + chunk, n + 1)):
                user = rnd.randint(100000, 999999)
                cents = rnd.randint(1000, 99999)
                total_cents += cents
                amount = "%d.%02d" % (cents // 100, cents % 100)
                status = statuses[rnd.randrange(6)]
                ms = i * 37  # ~10 hours of event time over 1M records
                ts = "2026-11-29T%02d:%02d:%02d.%03dZ" % (
                    ms // 3600000 % 24, ms // 60000 % 60, ms // 1000 % 60, ms % 1000)
                jl.append('{"order_id":%d,"user_id":%d,"amount":%s,"status":"%s","event_time":"%s"}\n'
                          % (i, user, amount, status, ts))
                cl.append("%d,%d,%s,%s,%s\n" % (i, user, amount, status, ts))
            s = "".join(jl)
            nbytes += len(s)
            fj.write(s)
            fc.write("".join(cl))
    print(n, nbytes, "%.1f" % ((nbytes - n) / n if n else 0),
          "%d.%02d" % (total_cents // 100, total_cents % 100))


if __name__ == "__main__":
    main()
