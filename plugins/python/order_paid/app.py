"""The "order paid" action, in Python (componentize-py). Left topic: orders; right topic: payments.

Same records as the Rust version (plugins/rust/order-paid), with "by": "python":
- match: {"order_id", "status": "paid", "order", "payment", "paid_at", "by"}
- expired order: {"order_id", "status": "unpaid", "order", "by"}
- expired payment: {"order_id", "status": "payment-without-order", "payment", "by"}

Build: componentize-py -d ../../../wit -w plugin componentize app -o order_paid_python.wasm
"""

import json

import wit_world
from wit_world.imports import host
from wit_world.imports.types import Event, OutputRecord, Side


def value_json(event: Event):
    if event.value is None:
        return None
    try:
        # Decoded first: on bytes, json.loads sniffs for UTF-16/32 in Python code, which adds about
        # 40 % to a small parse in CPython on Wasm. JSON between systems is UTF-8 (RFC 8259).
        return json.loads(event.value.decode())
    except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON (JSONDecodeError)
        return event.value.decode("utf-8", "replace")


# Built once: json.dumps with any argument besides the object builds a new JSONEncoder per call.
compact_json = json.JSONEncoder(separators=(",", ":")).encode


def record(key: bytes, body: dict) -> OutputRecord:
    value = compact_json(body).encode()
    return OutputRecord(topic=None, key=key, value=value, headers=[])


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        host.log(host.Level.INFO, f"order-paid (python) ready, {len(config)} config entries")

    def on_match(self, key: bytes, a: Event, b: Event):
        body = {
            "order_id": key.decode("utf-8", "replace"),
            "status": "paid",
            "order": value_json(a),
            "payment": value_json(b),
            "paid_at": b.timestamp,
            "by": "python",
        }
        return [record(key, body)]

    def on_expire(self, key: bytes, event: Event, side: Side):
        order_id = key.decode("utf-8", "replace")
        if side == Side.LEFT:
            body = {"order_id": order_id, "status": "unpaid", "order": value_json(event), "by": "python"}
        else:
            body = {
                "order_id": order_id,
                "status": "payment-without-order",
                "payment": value_json(event),
                "by": "python",
            }
        return [record(key, body)]
