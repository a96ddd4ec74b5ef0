#!/usr/bin/env python3
"""bench/sink_latency.py BOOTSTRAP IN_TOPIC OUT_TOPIC RATE SECONDS: end-to-end latency of a Kafka sink.

Produces RATE records per second for SECONDS seconds to IN_TOPIC, each
{"order_id": i, "sent_ms": <wall clock at produce, ms>}, paced by the
clock (not by acknowledgements), while a consumer reads OUT_TOPIC from its
end: the stream under test copies every record there (sent_ms passed
through) via its Kafka sink.  A record's latency is the wall clock when the
consumer received it minus its sent_ms: produce to delivered, through the
stream's batch, its commit, the outbox and the sink's producer.  Repeats
(the same order_id again) count once, at the first.

Prints "received N of M, p50 X ms, p90 Y ms, p99 Z ms, max W ms" and exits
non-zero when a record did not arrive within 30 s after the last was sent.
"""
import json
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition, OFFSET_END


def percentile(sorted_values, q):
    if not sorted_values:
        return float("nan")
    k = min(len(sorted_values) - 1, int(round(q / 100.0 * (len(sorted_values) - 1))))
    return sorted_values[k]


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__.splitlines()[0])
    bootstrap, in_topic, out_topic = sys.argv[1:4]
    rate, seconds = int(sys.argv[4]), int(sys.argv[5])
    total = rate * seconds

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-latency",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 5})
    md = consumer.list_topics(out_topic, timeout=10)
    parts = sorted(md.topics[out_topic].partitions)
    consumer.assign([TopicPartition(out_topic, p, OFFSET_END) for p in parts])
    # the assignment takes effect at the first poll: start reading before producing
    consumer.poll(0.5)

    latencies = {}
    done = threading.Event()

    def consume():
        while not done.is_set():
            m = consumer.poll(0.05)
            if m is None or m.error():
                continue
            now = time.time() * 1000.0
            v = json.loads(m.value())
            latencies.setdefault(v["order_id"], now - v["sent_ms"])

    reader = threading.Thread(target=consume)
    reader.start()

    # linger.ms 5 (librdkafka's default): the mock broker keeps each
    # partition's message sets in a list that every fetch searches from its
    # head, so one set per record (linger.ms 0) makes each fetch slower than
    # the last; after ~20 s at 2,000 records/s the mock used a whole core and
    # every stream reading lat_in fell seconds behind (the spikes of p90/p99).
    # The linger counts in the latency: sent_ms is taken before produce().
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    start = time.time()
    for i in range(total):
        # paced by the clock
        due = start + i / float(rate)
        delay = due - time.time()
        if delay > 0:
            time.sleep(delay)
        producer.produce(in_topic, json.dumps({"order_id": i + 1, "sent_ms": time.time() * 1000.0}))
        producer.poll(0)
    producer.flush(30)

    deadline = time.time() + 30
    while len(latencies) < total and time.time() < deadline:
        time.sleep(0.1)
    done.set()
    reader.join()
    consumer.close()

    values = sorted(latencies.values())
    print("received %d of %d, p50 %.0f ms, p90 %.0f ms, p99 %.0f ms, max %.0f ms"
          % (len(values), total, percentile(values, 50), percentile(values, 90),
             percentile(values, 99), values[-1] if values else float("nan")))
    sys.exit(0 if len(values) == total else 1)


if __name__ == "__main__":
    main()
