"""Unit tests of the action, run with `python -m pytest` (see conftest.py for the stand-ins)."""

import json

import app
from wit_world.imports.types import Event, Side


def event(topic: str, key: bytes, value, timestamp: int = 1764680400000) -> Event:
    data = None if value is None else json.dumps(value).encode()
    return Event(
        topic=topic, partition=0, offset=0, timestamp=timestamp, key=key, value=data, headers=[]
    )


def body(records) -> dict:
    assert len(records) == 1
    assert records[0].topic is None, "to the host's output topic"
    return json.loads(records[0].value)


def test_a_match_gives_one_record_with_both_values():
    plugin = app.WitWorld()
    plugin.init([])
    a = event("orders", b"order-1", {"amount": 20})
    b = event("payments", b"order-1", {"method": "card"}, timestamp=1764680405000)
    records = plugin.on_match(b"order-1", a, b)
    assert records[0].key == b"order-1"
    assert body(records) == {
        "key": "order-1",
        "status": "matched",
        "left": {"amount": 20},
        "right": {"method": "card"},
        "at": 1764680405000,
    }


def test_an_event_left_alone_is_reported_unmatched_with_its_side():
    plugin = app.WitWorld()
    records = plugin.on_expire(b"order-2", event("orders", b"order-2", {"amount": 35}), Side.LEFT)
    assert body(records) == {
        "key": "order-2",
        "status": "unmatched",
        "side": "left",
        "value": {"amount": 35},
    }


def test_a_value_that_is_not_json_is_passed_as_text_and_a_tombstone_as_null():
    plugin = app.WitWorld()
    e = event("payments", b"p", None)
    e.value = b"not json"
    assert body(plugin.on_expire(b"p", e, Side.RIGHT))["value"] == "not json"
    assert body(plugin.on_expire(b"p", event("payments", b"p", None), Side.RIGHT))["value"] is None
