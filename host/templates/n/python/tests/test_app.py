"""Unit tests of the action, run with `python -m pytest` (see conftest.py for the stand-ins)."""

import json

import app
from wit_world.imports.types import Event


def event(topic: str, key: bytes, value, timestamp: int = 1764680400000) -> Event:
    data = None if value is None else json.dumps(value).encode()
    return Event(
        topic=topic, partition=0, offset=0, timestamp=timestamp, key=key, value=data, headers=[]
    )


def body(records) -> dict:
    assert len(records) == 1
    assert records[0].topic is None, "to the host's output topic"
    return json.loads(records[0].value)


def test_a_match_gives_one_record_with_every_topics_value_in_order():
    plugin = app.WitWorld()
    plugin.init([])
    events = [
        event("orders", b"order-1", {"amount": 20}),
        event("payments", b"order-1", {"method": "card"}, timestamp=1764680405000),
        event("shipments", b"order-1", {"carrier": "post"}, timestamp=1764680403000),
    ]
    records = plugin.on_match_n(b"order-1", events)
    assert records[0].key == b"order-1"
    assert body(records) == {
        "key": "order-1",
        "status": "matched",
        "events": [{"amount": 20}, {"method": "card"}, {"carrier": "post"}],
        "at": 1764680405000,
    }


def test_an_event_left_without_a_match_is_reported_with_the_partners_it_found():
    plugin = app.WitWorld()
    order = event("orders", b"order-3", {"amount": 5})
    paid = [event("payments", b"order-3", {"method": "cash"})]
    assert body(plugin.on_expire_n(b"order-3", order, [paid, []])) == {
        "key": "order-3",
        "status": "unmatched",
        "value": {"amount": 5},
        "partners": [1, 0],
    }


def test_a_value_that_is_not_json_is_passed_as_text_and_a_tombstone_as_null():
    plugin = app.WitWorld()
    e = event("orders", b"p", None)
    e.value = b"not json"
    assert body(plugin.on_expire_n(b"p", e, [[], []]))["value"] == "not json"
    assert body(plugin.on_expire_n(b"p", event("orders", b"p", None), [[], []]))["value"] is None
