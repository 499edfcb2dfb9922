#!/usr/bin/env python3
"""The same windowed inner join with Quix Streams: StreamingDataFrame.join_interval.

left.join_interval(right, how="inner", backward_ms=window, forward_ms=window, grace_ms=window+grace)
stores both sides in a RocksDB timestamped store (per partition, under a temporary state dir) and,
for every record, looks up the other side's events of the same key:
  - a left record at t matches right events in [t - backward_ms, t],
  - a right record at t matches left events in [t - forward_ms, t],
so a pair with |ts(a) - ts(b)| <= window is reported once, when the later of the two (by timestamp)
is processed. That relies on Quix reading the two topics' partitions of the same number in
timestamp order, which it does for joined dataframes (its buffered, time-aligned consume). The
on_merge callback pairs the two values and the action builds the same output record as the
hand-written join (values are parsed by Quix's JSON deserializer; the action does json.dumps).
Outputs are counted, not produced.

With --join asof (the stream-table benchmark, `BENCH_DATA=table`): left.join_asof(right,
how="inner", grace_ms=--asof-grace-ms), Quix Streams' as-of join: the right topic's records (the
customers table) are written to a RocksDB store without emitting, and each left record (an order)
looks up its key's latest right record stamped at or before it; the customer's row goes out as
"payment", as cojoin's order-paid plugin writes b. A right record expires the key's older versions
stamped more than grace_ms before it (default here 7 days, Quix's own default).

Stops after --expect records (counted by Application's on_message_processed callback, which calls
app.stop()) or after --idle-secs with nothing consumed (Application.run(timeout=...); run's own
`count` counts outputs, not inputs). Prints one JSON line.
"""

import argparse
import json
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
import warnings

try:  # authlib (a quixstreams dependency) forces its DeprecationWarning on for every import
    from authlib.deprecate import AuthlibDeprecationWarning

    warnings.filterwarnings("ignore", category=AuthlibDeprecationWarning)
except ImportError:
    pass
from quixstreams import Application  # noqa: E402


def cpu_now() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", default="127.0.0.1:9092")
    p.add_argument("--left", required=True)
    p.add_argument("--right", required=True)
    p.add_argument("--window-ms", type=int, default=0, help="the interval join's window (required with it)")
    p.add_argument("--grace-ms", type=int, default=0)
    p.add_argument("--group", default=None, help="consumer group (default: a fresh one, so it reads from the start)")
    p.add_argument("--expect", type=int, default=0, help="stop after consuming this many records (both topics)")
    p.add_argument("--idle-secs", type=float, default=10.0, help="stop after this long with no new record")
    p.add_argument(
        "--changelog",
        action="store_true",
        help="back the join state with changelog topics (Quix's default; off here so a run leaves no "
        "extra topics on the broker and measures the join itself)",
    )
    p.add_argument("--join", choices=("interval", "asof"), default="interval")
    p.add_argument("--asof-grace-ms", type=int, default=7 * 24 * 3600 * 1000)
    p.add_argument("--loglevel", default="WARNING")
    a = p.parse_args()
    if a.join == "interval" and a.window_ms <= 0:
        p.error("--window-ms is required with the interval join")

    started_wall = time.monotonic()
    group = a.group or f"quixstreams-{os.getpid()}-{int(time.time())}"
    state_dir = tempfile.mkdtemp(prefix="quix-join-state-")
    stats = {"records": 0, "matches": 0, "out_bytes": 0, "first": None, "last": None, "startup_cpu": None}
    app = None

    def on_processed(_topic, _partition, _offset):
        now = time.monotonic()
        if stats["first"] is None:
            stats["first"] = now
            stats["startup_cpu"] = cpu_now()
        stats["last"] = now
        stats["records"] += 1
        if a.expect and stats["records"] >= a.expect:
            app.stop()

    try:
        app = Application(
            broker_address=a.bootstrap,
            consumer_group=group,
            auto_offset_reset="earliest",
            state_dir=state_dir,
            use_changelog_topics=a.changelog,
            on_message_processed=on_processed,
            loglevel=a.loglevel,
            consumer_extra_config={
                # Short group timeouts, as every system of the benchmark runs with.
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
            },
        )
        topics = [app.topic(t, key_deserializer="bytes", value_deserializer="json") for t in (a.left, a.right)]
        for topic in topics:
            # Quix derives its state store's changelog settings from the topics' "retention.ms" and
            # fails with KeyError when the broker does not report it (some Kafka-compatible brokers
            # describe only the configs a topic was created with). Assume unlimited retention then.
            extra = topic.broker_config.extra_config
            if "retention.ms" not in extra:
                print(f'quix_join: the broker reports no retention.ms for "{topic.name}", assuming -1', file=sys.stderr)
                extra["retention.ms"] = "-1"
        left, right = (app.dataframe(t) for t in topics)

        if a.join == "asof":
            joined = left.join_asof(
                right,
                how="inner",
                on_merge=lambda order, customer: (order, customer),  # a new object, inputs untouched
                grace_ms=a.asof_grace_ms,
            )
        else:
            joined = left.join_interval(
                right,
                how="inner",
                on_merge=lambda order, payment: (order, payment),  # a new object, inputs untouched
                grace_ms=a.window_ms + a.grace_ms,  # how long each side's events stay in the store, per key
                backward_ms=a.window_ms,  # right events up to window before a left one
                forward_ms=a.window_ms,  # right events up to window after a left one
            )

        def on_match(pair, key, _timestamp, _headers):
            order, payment = pair
            body = {
                "order_id": key.decode("utf-8", "replace"),
                "status": "paid",
                "amount": order.get("amount"),
                "order": order,
                "payment": payment,
                "by": "python",
            }
            out = json.dumps(body, separators=(",", ":")).encode()
            stats["matches"] += 1
            stats["out_bytes"] += len(out)
            return out

        joined.apply(on_match, metadata=True)

        app.run(timeout=a.idle_secs, collect=False)
    finally:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        shutil.rmtree(state_dir, ignore_errors=True)

    first, last = stats["first"], stats["last"]
    seconds = (last - first) if first is not None else 0.0
    print(
        json.dumps(
            {
                "system": "quixstreams" if a.join == "interval" else "quixstreams-asof",
                "records": stats["records"],
                "matches": stats["matches"],
                "seconds": round(seconds, 3),
                "records_per_sec": round(stats["records"] / seconds) if seconds > 0 else None,
                "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 3),
                "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),
                "startup_cpu_seconds": round(stats["startup_cpu"], 3) if stats["startup_cpu"] is not None else None,
                "wall_seconds": round(time.monotonic() - started_wall, 3),
                "output_bytes": stats["out_bytes"],
            }
        )
    )
    if a.expect and stats["records"] < a.expect:
        print(f"stopped idle after {stats['records']} of {a.expect} expected records", file=sys.stderr)


if __name__ == "__main__":
    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    main()
