#!/usr/bin/env python3
"""bench/topic_offsets.py BOOTSTRAP TOPIC: one line per partition, "partition low high".

Used after producing to check that the mock broker kept everything: its
partitions hold at most 5 MiB and silently drop the oldest message sets
beyond that, which shows up as a low watermark above 0.
"""
import sys

from confluent_kafka import Consumer, TopicPartition


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: topic_offsets.py BOOTSTRAP TOPIC")
    bootstrap, topic = sys.argv[1:]
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-offsets",
                  "enable.auto.commit": False})
    try:
        md = c.list_topics(topic, timeout=10)
        t = md.topics.get(topic)
        if t is None or t.error is not None:
            sys.exit("topic %s: %s" % (topic, t.error if t else "not found"))
        for p in sorted(t.partitions):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            print(p, lo, hi)
    finally:
        c.close()


if __name__ == "__main__":
    main()
