#!/usr/bin/env python3
"""Produce a deterministic left/right data set for the join benchmarks and print the expected
number of matches.

Record i (0 <= i < --records) has key "k-<i % keys>" on both topics. Left (an order) is at
base + i*step; right (a payment) is at left + d, where |d| <= window for even i (a partner within
the window, the edges -window and +window included) and window < |d| <= 1.5*window for odd i
(just outside). Each topic is produced in timestamp order. Values are JSON objects padded to
--value-bytes. The expected count is computed by brute force over the generated timestamps:
pairs (a, b) of the same key, a on the left, b on the right, with |ts(a) - ts(b)| <= window.
With the default --keys (= --records) every key has one event per side, so expected = records/2.

Keys are spread with librdkafka's "murmur2_random" partitioner (the Java client's default), so
both topics put a key in the same partition number, as a co-partitioned join needs.

With --third TOPIC (the three-topic data set of `BENCH_TOPICS=3 make bench-join`: orders,
payments, shipments) every key i has one event per topic and every key matches: the order at
base + i*step, its payment and its shipment each within window/2 of it, so the three lie within
`window` of each other (max - min <= window; every tenth key exactly window apart, the edge).
Then a three-way join (cojoin's N-way), two chained pairwise joins (Kafka Streams' KStream#join,
whose result carries max(ts) on to the second join, and Flink's intervalJoin, the same) all find
the same matches: one per key. The expected count is brute-forced all the same: triples of one
event per topic of a key whose timestamps lie within `window` of each other.
"""

import argparse
import bisect
import json
import random
import sys
import time
from collections import defaultdict

from confluent_kafka import Producer


def padded(obj: dict, size: int) -> bytes:
    obj = dict(obj, pad="")
    raw = json.dumps(obj, separators=(",", ":")).encode()
    if len(raw) < size:
        obj["pad"] = "x" * (size - len(raw))
        raw = json.dumps(obj, separators=(",", ":")).encode()
    return raw


def generate(n, keys, window, step, base, seed, unsorted_right=False):
    rng = random.Random(seed)
    left, right = [], []
    for i in range(n):
        key = f"k-{i % keys}"
        tl = base + i * step
        if i % 2 == 0:
            edge = i % 10
            d = window if edge == 0 else -window if edge == 2 else rng.randint(-window, window)
        else:
            d = rng.choice((-1, 1)) * (window + 1 + rng.randint(0, window // 2))
        left.append((tl, key, i))
        right.append((tl + d, key, i))
    if not unsorted_right:
        right.sort()
    return left, right


def generate_three(n, keys, window, step, base, seed):
    """Orders, payments and shipments: per record i, an order at base + i*step and a payment and a
    shipment within window/2 of it (every tenth i: at -window/2 and +window/2, the edge), each
    topic sorted by timestamp."""
    rng = random.Random(seed)
    half = window // 2
    orders, payments, shipments = [], [], []
    for i in range(n):
        key = f"k-{i % keys}"
        to = base + i * step
        if i % 10 == 0:
            dp, ds = -half, window - half
        else:
            dp, ds = rng.randint(-half, half), rng.randint(-half, half)
        orders.append((to, key, i))
        payments.append((to + dp, key, i))
        shipments.append((to + ds, key, i))
    payments.sort()
    shipments.sort()
    return orders, payments, shipments


def expected_matches_three(orders, payments, shipments, window):
    """Triples (o, p, s) of one key whose timestamps lie within `window` of each other."""
    by_key = [defaultdict(list), defaultdict(list)]
    for side, events in zip(by_key, (payments, shipments)):
        for ts, key, _ in events:
            side[key].append(ts)
        for v in side.values():
            v.sort()

    def near(side, key, ts):
        v = side.get(key, [])
        return v[bisect.bisect_left(v, ts - window) : bisect.bisect_right(v, ts + window)]

    total = 0
    for to, key, _ in orders:
        for tp in near(by_key[0], key, to):
            for ts in near(by_key[1], key, to):
                if max(to, tp, ts) - min(to, tp, ts) <= window:
                    total += 1
    return total


def generate_table(n, rows, step, base, seed):
    """Customers (rows, then an update of every tenth key) and orders keyed by customers, as
    (ts, key, i) each; every order is stamped after every row and update."""
    rng = random.Random(seed)
    table = [(base + j, f"c-{j}", j) for j in range(rows)]
    updated = range(0, rows, 10)
    table += [(base + rows + u, f"c-{j}", j) for u, j in enumerate(updated)]
    start = base + rows + len(updated) + 1000
    orders = [(start + i * step, f"c-{rng.randrange(rows)}", i) for i in range(n)]
    return orders, table


def expected_matches(left, right, window):
    by_key = defaultdict(list)
    for ts, key, _ in right:
        by_key[key].append(ts)
    for v in by_key.values():
        v.sort()
    total = 0
    for ts, key, _ in left:
        rts = by_key.get(key)
        if rts:
            total += bisect.bisect_right(rts, ts + window) - bisect.bisect_left(rts, ts - window)
    return total


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--left", default="left")
    p.add_argument("--right", default="right")
    p.add_argument(
        "--third",
        default=None,
        help="a third topic (shipments): the three-topic data set, every key one event per topic",
    )
    p.add_argument("--records", type=int, default=20000, help="records per topic")
    p.add_argument("--keys", type=int, default=0, help="distinct keys (default: --records, all unique)")
    p.add_argument("--window-ms", type=int, default=1000)
    p.add_argument("--step-ms", type=int, default=10, help="event-time gap between consecutive left records")
    p.add_argument("--base-ts", type=int, default=1_700_000_000_000)
    p.add_argument("--value-bytes", type=int, default=100)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--batch-size",
        type=int,
        default=10_000,
        help="librdkafka batch.num.messages (default 10000)",
    )
    p.add_argument(
        "--unsorted-right",
        action="store_true",
        help="produce right records in left order (out of timestamp order by up to 2.5*window) "
        "instead of sorted by timestamp; a join needs grace >= 2.5*window to see every pair",
    )
    p.add_argument(
        "--table",
        action="store_true",
        help="the stream-table data set: --right is a table of customers, --left a stream of orders keyed by them",
    )
    p.add_argument("--table-rows", type=int, default=0, help="the table's rows, one per key (default: --records)")
    p.add_argument("--dry-run", action="store_true", help="only print the expected count")
    a = p.parse_args()
    keys = a.keys or a.records

    rows = a.table_rows or a.records
    if a.table:
        left, right = generate_table(a.records, rows, a.step_ms, a.base_ts, a.seed)
        third = []
        expected = len(left)
    elif a.third:
        left, right, third = generate_three(a.records, keys, a.window_ms, a.step_ms, a.base_ts, a.seed)
        expected = expected_matches_three(left, right, third, a.window_ms)
    else:
        left, right = generate(a.records, keys, a.window_ms, a.step_ms, a.base_ts, a.seed, a.unsorted_right)
        third = []
        expected = expected_matches(left, right, a.window_ms)
    started = time.monotonic()
    if not a.dry_run:
        producer = Producer(
            {
                "bootstrap.servers": a.bootstrap,
                "partitioner": "murmur2_random",
                "batch.num.messages": a.batch_size,
                "linger.ms": 5,
                "queue.buffering.max.messages": 1_000_000,
                "acks": "all",
            }
        )
        errors = []

        def on_delivery(err, _msg):
            if err is not None:
                errors.append(err)

        def order(i):
            return {"id": i, "amount": round(5 + (i * 7919 % 50000) / 100, 2), "customer": f"c-{i % 997}"}

        def customer(ts, j):
            # The first version of a row, or (stamped after every row) the update of a tenth of keys.
            version = 1 if ts < a.base_ts + rows else 2
            return {"id": j, "name": f"customer {j}", "tier": "gold" if j % 7 == 0 else "basic", "version": version}

        sets = [(a.left, left, lambda _ts, i: order(i))]
        if a.table:
            sets.insert(0, (a.right, right, customer))  # the table first, as its timestamps are
        else:
            sets.append((a.right, right, lambda _ts, i: {"id": i, "method": "card" if i % 3 else "transfer"}))
            sets.append((a.third, third, lambda _ts, i: {"id": i, "carrier": "post" if i % 4 else "courier"}))
        for topic, events, make in sets:
            for ts, key, i in events:
                while True:
                    try:
                        producer.produce(topic, key=key.encode(), value=padded(make(ts, i), a.value_bytes), timestamp=ts, on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.1)
                producer.poll(0)
        remaining = producer.flush(60)
        if remaining or errors:
            print(f"produce failed: {remaining} undelivered, {len(errors)} errors, first: {errors[:1]}", file=sys.stderr)
            sys.exit(1)
    counts = {"left": len(left), "right": len(right)}
    if a.third:
        counts["third"] = len(third)
    if a.table:
        counts["rows"] = rows
    print(
        json.dumps(
            dict(
                counts,
                records=len(left) + len(right) + len(third),
                keys=rows if a.table else keys,
                window_ms=a.window_ms,
                expected_matches=expected,
                produce_seconds=round(time.monotonic() - started, 3),
            )
        )
    )


if __name__ == "__main__":
    main()
