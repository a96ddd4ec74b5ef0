#!/usr/bin/env python3
"""bench/latency_producer.py: the producer of bench/run.sh --latency.

  latency_producer.py --bootstrap B --topic T --rate R --seconds S --first-id N

Produces R records per second for S seconds to topic T, each an order
record as bench/gen_orders.py makes them, with two more keys:

  {"order_id":N,"user_id":..,"amount":..,"status":"paid",
   "event_time":"2026-11-29T..Z","rate":R,
   "produced_at":"2026-12-01T13:52:50.123456Z"}

produced_at is the wall clock (microseconds, UTC) just before the record is
handed to the Kafka client, so that produced_at -> committed in the sink is
the whole way, the client's own queueing included (linger.ms=0: it sends at
once).  Records are paced on the clock: every ~0.5 ms it produces what is
due since the start (R * elapsed), so a slow loop catches up instead of
lowering the rate.  Keyless records go to a random partition
(sticky.partitioning.linger.ms=0).

Prints "records seconds first_id last_id" when every record is delivered.
"""
import argparse
import datetime
import random
import sys
import time

from confluent_kafka import Producer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--rate", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--first-id", type=int, default=1)
    ap.add_argument("--linger-ms", type=int, default=0)
    args = ap.parse_args()
    if args.rate <= 0 or args.seconds <= 0:
        ap.error("--rate and --seconds must be positive")

    failed = []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)

    p = Producer({"bootstrap.servers": args.bootstrap, "linger.ms": args.linger_ms,
                  "sticky.partitioning.linger.ms": 0,
                  "queue.buffering.max.messages": 1000000})
    rnd = random.Random(7)
    statuses = ["created", "paid", "paid", "paid", "shipped", "cancelled"]
    total = int(args.rate * args.seconds)
    oid = args.first_id
    sent = 0
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    t0 = time.time()
    while sent < total:
        now = time.time()
        due = min(total, int((now - t0) * args.rate) + 1)
        while sent < due:
            cents = rnd.randint(1000, 99999)
            ts = time.time()
            produced = (epoch + datetime.timedelta(microseconds=int(ts * 1e6))).strftime(
                "%Y-%m-%dT%H:%M:%S.%fZ")
            rec = ('{"order_id":%d,"user_id":%d,"amount":%d.%02d,"status":"%s",'
                   '"event_time":"%s","rate":%d,"produced_at":"%s"}'
                   % (oid, rnd.randint(100000, 999999), cents // 100, cents % 100,
                      statuses[rnd.randrange(6)], produced, args.rate, produced))
            while True:
                try:
                    p.produce(args.topic, rec.encode(), on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.001)
            oid += 1
            sent += 1
        p.poll(0)
        time.sleep(0.0005)
    secs = time.time() - t0
    if p.flush(30) != 0 or failed:
        sys.exit("latency_producer.py: %d records not delivered (%s)"
                 % (len(failed), failed[:1]))
    print(sent, "%.3f" % secs, args.first_id, oid - 1)


if __name__ == "__main__":
    main()
