"""{{name}}: a cojoin join action over several topics, in Python (componentize-py, world plugin-n).

cojoin calls on_match_n with one event of each topic in join.topics (cojoin.toml), in that order,
for every combination of events with the same key whose timestamps lie within the join window of
each other; and, in a left join, on_expire_n for an event of the first topic that took part in no
match by the time its window closed, with the partners it did find (one list per later topic).
Each returns the records to produce. Raise componentize_py_types.Err("why") to fail a call: the
host retries it, then dead-letters its inputs.

This skeleton produces, to the output topic:
- a match: {"key", "status": "matched", "events": [each topic's value], "at"}
- an expired event: {"key", "status": "unmatched", "value", "partners": [events per later topic]}

Check: python -m pytest    Build: cojoin plugin build    Replay: cojoin plugin test
"""

import json

import wit_world
from wit_world.imports import host
from wit_world.imports.types import Event, OutputRecord


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

    def on_match_n(self, key: bytes, events):
        body = {
            "key": key.decode("utf-8", "replace"),
            "status": "matched",
            "events": [value_json(e) for e in events],
            "at": max(e.timestamp for e in events),
        }
        return [record(key, body)]

    def on_expire_n(self, key: bytes, event: Event, partners):
        body = {
            "key": key.decode("utf-8", "replace"),
            "status": "unmatched",
            "value": value_json(event),
            "partners": [len(found) for found in partners],
        }
        return [record(key, body)]
