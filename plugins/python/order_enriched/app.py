"""The "order enriched" action of a stream-table join, in Python (componentize-py). Left: the
orders stream; right: the customers table (examples/orders-customers). The join key is the
customer id (the stream's `join.left_key = "/customer_id"`), so the order id comes from the
order's value.

Records, keyed by the order id (the join key when the order has no "order_id" field):
- match, the customer's row as of the order's time:
  {"order_id", "customer_id", "status": "enriched", "order", "customer", "customer_version_ts", "by"}
  where customer_version_ts is the timestamp of the table update that made the row
- an order without a row (a left join: no such customer, or deleted, at the order's time):
  {"order_id", "customer_id", "status": "no-customer", "order", "by"}

Build: componentize-py -d ../../../wit -w plugin componentize app -o order_enriched_python.wasm
"""

import json

import wit_world
from wit_world.imports import host
from wit_world.imports.types import Event, OutputRecord, Side


def value_json(event: Event):
    if event.value is None:
        return None
    try:
        # Decoded first: on bytes, json.loads sniffs for UTF-16/32 (slower in CPython on Wasm).
        return json.loads(event.value.decode())
    except ValueError:  # not UTF-8 (UnicodeDecodeError) or not JSON (JSONDecodeError)
        return event.value.decode("utf-8", "replace")


# Built once: json.dumps with any argument besides the object builds a new JSONEncoder per call.
compact_json = json.JSONEncoder(separators=(",", ":")).encode


def order_id(key: bytes, order) -> str:
    if isinstance(order, dict) and order.get("order_id") is not None:
        return str(order["order_id"])
    return key.decode("utf-8", "replace")


def record(body: dict) -> OutputRecord:
    return OutputRecord(topic=None, key=body["order_id"].encode(), value=compact_json(body).encode(), headers=[])


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        host.log(host.Level.INFO, f"order-enriched (python) ready, {len(config)} config entries")

    def on_match(self, key: bytes, a: Event, b: Event):
        order = value_json(a)
        body = {
            "order_id": order_id(key, order),
            "customer_id": key.decode("utf-8", "replace"),
            "status": "enriched",
            "order": order,
            "customer": value_json(b),
            "customer_version_ts": b.timestamp,
            "by": "python",
        }
        return [record(body)]

    def on_expire(self, key: bytes, event: Event, side: Side):
        if side != Side.LEFT:
            # A table join hands over only stream records; nothing to say of a table row.
            return []
        order = value_json(event)
        body = {
            "order_id": order_id(key, order),
            "customer_id": key.decode("utf-8", "replace"),
            "status": "no-customer",
            "order": order,
            "by": "python",
        }
        return [record(body)]
