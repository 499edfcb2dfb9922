#!/usr/bin/env python3
"""A hand-written windowed stream-stream inner join in one Python process (confluent-kafka).

The baseline for "what people write today": one Consumer subscribed to both topics, a dict per side
mapping a record key to the (timestamp, value) events kept for the window, and a Python action on
every match. Same semantics as cojoin's inner join: a left event a and a right event b with the same
key match when |ts(a) - ts(b)| <= window, and each matching pair is reported once (by whichever of
the two is consumed second).

Eviction: an event of one side is dropped once the *other* side's stream time in the same partition
number passes ts + window + grace (stream time = the max timestamp seen). Using the other side's
per-partition time instead of one global max_ts_seen is what keeps the count exact: librdkafka hands
over a whole fetch of one partition before the next, so a global max would race ahead and evict
events whose partners have not been consumed yet. It assumes co-partitioned topics (same partition
count and partitioner on both sides), as cojoin and Kafka Streams do, and each partition in
timestamp order up to `grace`.

Prints one JSON line at the end. Outputs are built (json.loads of both values, json.dumps of the
result) and counted; they are produced to Kafka only with --output-topic.
"""

import argparse
import heapq
import json
import os
import resource
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

LEFT, RIGHT = 0, 1


def cpu_now() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def on_match(key: bytes, left: bytes, right: bytes) -> bytes:
    """The action: the same record as the order-paid example plugin (left = order, right = payment)."""
    order = json.loads(left)
    payment = json.loads(right)
    body = {
        "order_id": key.decode("utf-8", "replace"),
        "status": "paid",
        "amount": order.get("amount"),
        "order": order,
        "payment": payment,
        "by": "python",
    }
    return json.dumps(body, separators=(",", ":")).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--left", required=True)
    p.add_argument("--right", required=True)
    p.add_argument("--window-ms", type=int, required=True)
    p.add_argument("--grace-ms", type=int, default=0)
    p.add_argument("--group", default=None, help="consumer group (default: a fresh one, so it reads from the start)")
    p.add_argument("--expect", type=int, default=0, help="stop after consuming this many records (both topics)")
    p.add_argument("--idle-secs", type=float, default=10.0, help="stop after this long with no new record")
    p.add_argument("--output-topic", default=None, help="also produce every output record here")
    a = p.parse_args()

    started_wall = time.monotonic()
    group = a.group or f"python-handwritten-{os.getpid()}-{int(time.time())}"
    consumer = Consumer(
        {
            "bootstrap.servers": a.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # Short group timeouts, as every system of the benchmark runs with.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    producer = Producer({"bootstrap.servers": a.bootstrap, "linger.ms": 5}) if a.output_topic else None
    consumer.subscribe([a.left, a.right])

    window, horizon = a.window_ms, a.window_ms + a.grace_ms
    # state[side][key] = [(ts, seq, value), ...]; expiry[side][partition] = heap of (ts, seq, key)
    state = ({}, {})
    expiry = ({}, {})
    stream_time = ({}, {})  # [side][partition] = max timestamp seen
    seq = 0
    records = matches = out_bytes = held = 0
    first = last = None
    startup_cpu = None
    idle_since = time.monotonic()
    left_topic = a.left

    try:
        while not (a.expect and records >= a.expect):
            msgs = consumer.consume(num_messages=1000, timeout=0.2)
            now = time.monotonic()
            if not msgs:
                if now - idle_since >= a.idle_secs:
                    break
                continue
            idle_since = now
            if first is None:
                first = now
                startup_cpu = cpu_now()
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(err)
                records += 1
                side = LEFT if msg.topic() == left_topic else RIGHT
                other = 1 - side
                key = msg.key()
                ts = msg.timestamp()[1]
                value = msg.value()
                part = msg.partition()

                partners = state[other].get(key)
                if partners:
                    for ots, _, oval in partners:
                        if -window <= ts - ots <= window:
                            matches += 1
                            out = on_match(key, value, oval) if side == LEFT else on_match(key, oval, value)
                            out_bytes += len(out)
                            if producer is not None:
                                producer.produce(a.output_topic, key=key, value=out)

                seq += 1
                events = state[side].get(key)
                if events is None:
                    state[side][key] = [(ts, seq, value)]
                else:
                    events.append((ts, seq, value))
                heap = expiry[side].get(part)
                if heap is None:
                    heap = expiry[side][part] = []
                heapq.heappush(heap, (ts, seq, key))
                held += 1

                # This record moves this side's stream time in its partition: the other side's
                # events there older than stream time - window - grace can no longer match.
                st = stream_time[side]
                if ts > st.get(part, -1):
                    st[part] = ts
                    old = expiry[other].get(part)
                    if old:
                        cutoff = ts - horizon
                        other_state = state[other]
                        while old and old[0][0] < cutoff:
                            _, oseq, okey = heapq.heappop(old)
                            lst = other_state[okey]
                            if lst[0][1] == oseq:
                                del lst[0]
                            else:
                                lst[:] = [e for e in lst if e[1] != oseq]
                            if not lst:
                                del other_state[okey]
                            held -= 1
                if a.expect and records >= a.expect:
                    break
            if producer is not None:
                producer.poll(0)
            last = time.monotonic()
    finally:
        if producer is not None:
            producer.flush(30)
        ru = resource.getrusage(resource.RUSAGE_SELF)
        consumer.close()

    seconds = (last - first) if first is not None and last is not None else 0.0
    print(
        json.dumps(
            {
                "system": "python-handwritten",
                "records": records,
                "matches": matches,
                "seconds": round(seconds, 3),
                "records_per_sec": round(records / seconds) if seconds > 0 else None,
                "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 3),
                "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
                "startup_cpu_seconds": round(startup_cpu, 3) if startup_cpu is not None else None,
                "wall_seconds": round(time.monotonic() - started_wall, 3),
                "held_at_end": held,
                "output_bytes": out_bytes,
            }
        )
    )
    if a.expect and records < a.expect:
        print(f"stopped idle after {records} of {a.expect} expected records", file=sys.stderr)


if __name__ == "__main__":
    main()
