#!/usr/bin/env python3
"""bench/consumer_latency.py: produce -> delivered to a plain consumer.

  consumer_latency.py --bootstrap B --topic T --count N [--skip-seconds 2]
      [--option KEY=VALUE]...

The broker's and client's share of bench/latency.sh's figures, without
PostgreSQL: a librdkafka consumer (confluent_kafka) reads every partition
of T from its end, with the consumer properties the continuous trigger
sets (fetch.min.bytes 1, fetch.wait.max.ms 5; --option overrides), and for
each record takes the wall clock when the client hands it over minus the
record's produced_at (bench/latency_producer.py).  Prints "ready" once it
is assigned, then, after N records (the first --skip-seconds of them left
out), "records p50_ms p99_ms max_ms".
"""
import argparse
import datetime
import json
import sys
import time

from confluent_kafka import Consumer, TopicPartition, OFFSET_END


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--skip-seconds", type=float, default=2.0)
    ap.add_argument("--option", action="append", default=[])
    args = ap.parse_args()
    conf = {"bootstrap.servers": args.bootstrap, "group.id": "consumer_latency",
            "enable.auto.commit": False, "fetch.min.bytes": 1, "fetch.wait.max.ms": 5,
            "queued.min.messages": 10000000, "enable.partition.eof": False}
    for kv in args.option:
        k, _, v = kv.partition("=")
        conf[k] = v
    c = Consumer(conf)
    md = c.list_topics(args.topic, timeout=10)
    parts = md.topics[args.topic].partitions
    c.assign([TopicPartition(args.topic, p, OFFSET_END) for p in parts])
    # the assignment is in place once a poll has run
    c.poll(0.5)
    print("ready", flush=True)
    lat = []
    first = None
    got = 0
    while got < args.count:
        # poll, not consume: consume waits until it has num_messages
        m = c.poll(1.0)
        now = time.time()
        if m is None or m.error():
            continue
        got += 1
        rec = json.loads(m.value())
        ts = datetime.datetime.strptime(rec["produced_at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
        if first is None:
            first = ts
        if ts >= first + args.skip_seconds:
            lat.append((now - ts) * 1000)
    c.close()
    lat.sort()
    if not lat:
        sys.exit("consumer_latency.py: no records past the first %g s" % args.skip_seconds)
    q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))]
    print(len(lat), "%.2f" % q(0.5), "%.2f" % q(0.99), "%.1f" % lat[-1])


if __name__ == "__main__":
    main()
