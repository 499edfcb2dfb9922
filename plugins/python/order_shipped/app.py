"""The "order shipped" action of a three-topic join, in Python (world plugin-n). Topics, in
join.topics order: orders, payments, shipments.

Same records as the Rust version (plugins/rust/order-shipped), with "by": "python":
- match: {"order_id", "status": "shipped", "order", "payment", "shipment", "shipped_at", "by"}
- expired order (a left join): {"order_id", "status", "order", "payments", "shipments", "by"},
  the status "unpaid" when no payment came in its window, else "not-shipped"

Build: componentize-py -d ../../../wit -w plugin-n componentize app -o order_shipped_python.wasm
"""

import json

import wit_world
from componentize_py_types import Err, Ok
from wit_world.imports import host
from wit_world.imports.types import CallN_OnMatchN, Event, OutputRecord


def value_json(event: Event):
    if event.value is None:
        return None
    try:
        return json.loads(event.value.decode())
    except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON (JSONDecodeError)
        return event.value.decode("utf-8", "replace")


compact_json = json.JSONEncoder(separators=(",", ":")).encode


def record(key: bytes, body: dict) -> OutputRecord:
    return OutputRecord(topic=None, key=key, value=compact_json(body).encode(), headers=[])


def on_match(key: bytes, events):
    if len(events) != 3:
        raise Err(f"a three-topic join gives 3 events, not {len(events)}")
    order, payment, shipment = events
    body = {
        "order_id": key.decode("utf-8", "replace"),
        "status": "shipped",
        "order": value_json(order),
        "payment": value_json(payment),
        "shipment": value_json(shipment),
        "shipped_at": shipment.timestamp,
        "by": "python",
    }
    return [record(key, body)]


def on_expire(key: bytes, order: Event, partners):
    payments = len(partners[0]) if len(partners) > 0 else 0
    shipments = len(partners[1]) if len(partners) > 1 else 0
    body = {
        "order_id": key.decode("utf-8", "replace"),
        "status": "unpaid" if payments == 0 else "not-shipped",
        "order": value_json(order),
        "payments": payments,
        "shipments": shipments,
        "by": "python",
    }
    return [record(key, body)]


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        host.log(host.Level.INFO, f"order-shipped (python) ready, {len(config)} config entries")

    def on_match_n(self, key: bytes, events):
        return on_match(key, events)

    def on_expire_n(self, key: bytes, event: Event, partners):
        return on_expire(key, event, partners)

    def on_batch_n(self, calls):
        # One result per call: its records, or the Err it raised.
        results = []
        for call in calls:
            args = call.value
            try:
                if type(call) is CallN_OnMatchN:
                    results.append(Ok(on_match(args.key, args.events)))
                else:
                    results.append(Ok(on_expire(args.key, args.event, args.partners)))
            except Err as e:
                results.append(e)
        return results
