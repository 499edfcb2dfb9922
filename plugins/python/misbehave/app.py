"""A test fixture, not an example: how a Python plugin fails. By key: "err:<text>" returns the
error <text> (raises Err), "crash" raises an exception (a trap), "spin:<ms>" computes for <ms>
milliseconds first; anything else returns one record whose value is the key."""

import time

import wit_world
from componentize_py_types import Err
from wit_world.imports.types import OutputRecord


def answer(key: bytes):
    if key.startswith(b"err:"):
        raise Err(key[4:].decode())
    if key == b"crash":
        raise RuntimeError("crash on purpose")
    if key.startswith(b"spin:"):
        end = time.perf_counter() + int(key[5:]) / 1000
        while time.perf_counter() < end:
            pass
    return [OutputRecord(topic=None, key=key, value=key, headers=[])]


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        pass

    def on_match(self, key, a, b):
        return answer(key)

    def on_expire(self, key, event, side):
        return answer(key)
