"""{{name}}: a cojoin join action, in Python (componentize-py).

cojoin calls on_match for every pair of events with the same key within the join window (a from
join.left, b from join.right in cojoin.toml), and on_expire for an event whose window closed with
no partner (left and outer joins). Each returns the records to produce. Raise
componentize_py_types.Err("why") to fail a call: the host retries it, then dead-letters its inputs.

This skeleton produces, to the output topic:
- a match: {"key", "status": "matched", "left", "right", "at"}
- an expired event: {"key", "status": "unmatched", "side", "value"}

Check: python -m pytest    Build: cojoin plugin build    Replay: cojoin plugin test
"""

import json

import wit_world
from wit_world.imports import host
from wit_world.imports.types import Event, OutputRecord, Side


def value_json(event: Event):
    """The event's value: parsed when it is JSON, else text; None for a tombstone."""
    if event.value is None:
        return None
    try:
        return json.loads(event.value)
    except ValueError:
        return event.value.decode("utf-8", "replace")


def record(key: bytes, body: dict) -> OutputRecord:
    value = json.dumps(body, separators=(",", ":")).encode()
    # topic=None: the host's output.topic.
    return OutputRecord(topic=None, key=key, value=value, headers=[])


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        host.log(host.Level.INFO, f"{{name}} ready, {len(config)} config entries")

    def on_match(self, key: bytes, a: Event, b: Event):
        body = {
            "key": key.decode("utf-8", "replace"),
            "status": "matched",
            "left": value_json(a),
            "right": value_json(b),
            "at": max(a.timestamp, b.timestamp),
        }
        return [record(key, body)]

    def on_expire(self, key: bytes, event: Event, side: Side):
        body = {
            "key": key.decode("utf-8", "replace"),
            "status": "unmatched",
            "side": "left" if side == Side.LEFT else "right",
            "value": value_json(event),
        }
        return [record(key, body)]
