#!/usr/bin/env python3
"""bench/python_loop.py: the hand-written baseline of bench/run.sh.

An exactly-once Kafka-to-PostgreSQL consumer as one would write it without
the extension (confluent_kafka + psycopg2):

  * positions are kept in a table (bench_offsets), not in consumer groups;
    the consumer is assign()ed to every partition at its stored offset
    (earliest when there is none);
  * the end of the work is every partition's high watermark when the loop
    starts (never an empty fetch or a timeout);
  * per batch of about --batch records: parse the JSON, COPY the rows into
    the typed table with copy_expert, upsert the new offsets, commit, all in
    one transaction, so a crash at any point loses or repeats nothing.

With --aggregate AGG (the aggregate benchmark, run.sh --aggregate) each batch
is COPYed into a temporary staging table instead (--table is not used), then
merged into AGG, which must exist with the columns (window_start, window_end,
status, cnt, total_amount, avg_amount) and a primary key on (window_start,
status), by one

  INSERT INTO AGG SELECT date_bin('5 minutes', event_time, 'epoch'), ...,
         count(*), sum(amount), avg(amount) FROM stage GROUP BY 1, 2, 3
  ON CONFLICT (window_start, status) DO UPDATE SET cnt = AGG.cnt + excluded.cnt,
         total_amount = ..., avg_amount = new total / new cnt

before the offsets are written and the transaction commits; the staging
table is emptied at commit.

queued.min.messages is raised to 1000000 (see FIELD-NOTES: with the default
100000 and 32 partitions the 2.0.2 client pauses about 1 s between fetches).

Prints "records seconds records_per_second batches peak_rss_kb backend_peak_rss_kb
cpu_seconds backend_cpu_seconds" on stdout (peak RSS: VmHWM of this process and
of its server backend; CPU: user + system time of each).
"""
import argparse
import io
import json
import os
import resource
import sys
import time

import psycopg2
import psycopg2.extras
from confluent_kafka import Consumer, KafkaError, TopicPartition


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--table")
    ap.add_argument("--aggregate", metavar="AGG")
    ap.add_argument("--batch", type=int, default=50000)
    args = ap.parse_args()
    if not args.table and not args.aggregate:
        ap.error("--table or --aggregate is required")

    t0 = time.monotonic()
    conn = psycopg2.connect(args.dsn)
    cur = conn.cursor()
    cur.execute("CREATE TABLE IF NOT EXISTS bench_offsets (topic text, partition int, "
                "next_offset bigint NOT NULL, PRIMARY KEY (topic, partition))")
    conn.commit()

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "group.id": "bench-python-loop",  # required by the client; never used
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": False,
        "queued.min.messages": 1000000,
    })

    md = consumer.list_topics(args.topic, timeout=10).topics[args.topic]
    if md.error is not None:
        sys.exit("topic %s: %s" % (args.topic, md.error))
    parts = sorted(md.partitions)
    low, high = {}, {}
    for p in parts:
        low[p], high[p] = consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10)

    cur.execute("SELECT partition, next_offset FROM bench_offsets WHERE topic = %s", (args.topic,))
    pos = {p: low[p] for p in parts}
    pos.update(dict(cur.fetchall()))
    conn.commit()
    consumer.assign([TopicPartition(args.topic, p, pos[p]) for p in parts if pos[p] < high[p]])

    total = 0
    batches = 0
    loads = json.loads
    agg_sql = None
    if args.aggregate:
        cur.execute("CREATE TEMP TABLE bench_stage (order_id bigint, user_id bigint, "
                    "amount numeric(10,2), status text, event_time timestamptz) ON COMMIT DELETE ROWS")
        conn.commit()
        copy_sql = "COPY bench_stage (order_id, user_id, amount, status, event_time) FROM STDIN"
        agg_sql = ("INSERT INTO {a} AS a (window_start, window_end, status, cnt, total_amount, avg_amount) "
                   "SELECT date_bin('5 minutes', event_time, 'epoch'), "
                   "date_bin('5 minutes', event_time, 'epoch') + interval '5 minutes', "
                   "status, count(*), sum(amount), avg(amount) FROM bench_stage GROUP BY 1, 2, 3 "
                   "ON CONFLICT (window_start, status) DO UPDATE SET cnt = a.cnt + excluded.cnt, "
                   "total_amount = a.total_amount + excluded.total_amount, "
                   "avg_amount = (a.total_amount + excluded.total_amount) / (a.cnt + excluded.cnt)"
                   ).format(a=args.aggregate)
    else:
        copy_sql = "COPY %s (order_id, user_id, amount, status, event_time) FROM STDIN" % args.table
    upsert = ("INSERT INTO bench_offsets (topic, partition, next_offset) VALUES (%s, %s, %s) "
              "ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset")
    while True:
        remaining = sum(high[p] - pos[p] for p in parts)
        if remaining <= 0:
            break
        want = min(args.batch, remaining)
        rows = []
        changed = set()
        deadline = time.monotonic() + 30
        while len(rows) < want:
            if time.monotonic() > deadline:
                sys.exit("timed out waiting for records (have %d of %d in this batch)"
                         % (len(rows), want))
            msgs = consumer.consume(num_messages=want - len(rows), timeout=1.0)
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    sys.exit("Kafka error: %s" % err)
                p = m.partition()
                off = m.offset()
                if off < pos[p] or off >= high[p]:
                    continue  # already loaded, or past this run's end
                d = loads(m.value(), parse_float=str)
                rows.append("%d\t%d\t%s\t%s\t%s\n" % (d["order_id"], d["user_id"], d["amount"],
                                                      d["status"], d["event_time"]))
                pos[p] = off + 1
                changed.add(p)
        cur.copy_expert(copy_sql, io.StringIO("".join(rows)))
        if agg_sql:
            cur.execute(agg_sql)
        psycopg2.extras.execute_batch(cur, upsert, [(args.topic, p, pos[p]) for p in sorted(changed)])
        conn.commit()
        total += len(rows)
        batches += 1

    elapsed = time.monotonic() - t0
    # the backend's own VmHWM and CPU time (the server reads its /proc/self;
    # needs superuser); utime and stime are fields 14 and 15 of /proc/PID/stat
    try:
        cur.execute("SELECT substring(pg_read_file('/proc/self/status') FROM 'VmHWM:\\s*(\\d+)'), "
                    "(SELECT (f[12]::bigint + f[13]::bigint) FROM "
                    "string_to_array(split_part(pg_read_file('/proc/self/stat'), ') ', 2), ' ') f)")
        backend_kb, backend_ticks = cur.fetchone()
        backend_cpu = "%.2f" % (backend_ticks / os.sysconf("SC_CLK_TCK"))
    except psycopg2.Error:
        backend_kb, backend_cpu = "-", "-"
    conn.rollback()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    consumer.close()
    conn.close()
    print(total, "%.3f" % elapsed, "%.0f" % (total / elapsed if elapsed > 0 else 0), batches,
          ru.ru_maxrss, backend_kb, "%.2f" % (ru.ru_utime + ru.ru_stime), backend_cpu)


if __name__ == "__main__":
    main()
