#!/usr/bin/env python3
"""Produces this example's recording (events.jsonl, the stream `cojoin plugin test` replays) to a
real broker: the customers table's updates and deletion, then the orders, each record with the
recording's timestamp moved to the last ten minutes (within the host's join.max_future and the
table's hour of history), keyed as recorded (customers by customer id, orders by order id).

It runs tests/kafka/Produce.java, Apache Kafka's own Java producer (murmur2 partitioner, as the
table must be produced with), from the jars of `make kafka-libs`; a null value is a tombstone.

    python3 examples/orders-customers/produce.py --bootstrap 127.0.0.1:9092
    python3 examples/orders-customers/produce.py --print    # the records, for Produce.java's stdin
"""

import argparse
import json
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def lines(events, shift_ms: int):
    """Produce.java's input: topic, partition (-1: by key), timestamp, key[, value]. The table
    first, flushed (an empty line), then the stream, each in the recording's order."""
    out = []
    for topic in ("customers", "orders"):
        for e in (e for e in events if e["topic"] == topic):
            fields = [topic, "-1", str(e["timestamp"] + shift_ms), e["key"]]
            if e["value"] is not None:
                fields.append(json.dumps(e["value"], separators=(",", ":")))
            out.append("\t".join(fields))
        out.append("")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--print", action="store_true", help="print the records instead")
    args = parser.parse_args()
    events = [json.loads(l) for l in (HERE / "events.jsonl").read_text().splitlines() if l.strip()]
    first = min(e["timestamp"] for e in events)
    shift_ms = int(time.time() * 1000) - 10 * 60_000 - first
    text = "\n".join(lines(events, shift_ms)) + "\n"
    if args.print:
        sys.stdout.write(text)
        return 0
    libs = ROOT / "tests/kafka/target/kafka-libs"
    if not libs.is_dir():
        sys.exit(f"no Kafka jars in {libs}: run `make kafka-libs` first")
    java = ["java", "-cp", f"{libs}/*", str(ROOT / "tests/kafka/Produce.java"), args.bootstrap, "none"]
    return subprocess.run(java, input=text.encode()).returncode


if __name__ == "__main__":
    sys.exit(main())
