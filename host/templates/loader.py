"""Written by `cojoin plugin build`, rewritten at every full build: do not edit.

The component's entry point. It imports app.py at build time, so the interpreter snapshot that
componentize-py makes holds app.py and everything it imports, and it hands each call to
app.WitWorld. It also serves on_batch (world plugin-batched): the host's batches of matches and
expiries, each handed to app.WitWorld's on_match / on_expire in order; and on_batch_n (world
plugin-n, an app defining on_match_n / on_expire_n), the same for a join of three topics or more.
When only app.py changed since, `cojoin plugin build` reuses the component and
embeds the new source, which the host passes to init under SOURCE_KEY: init then runs that source
as the module app, and its WitWorld serves from then on.
"""

import sys
import types

import app
import wit_world
from componentize_py_types import Err, Ok

try:
    from wit_world.imports.types import Call_OnMatch
except ImportError:  # built for the world `plugin` (a project's older WIT): no on_batch export
    Call_OnMatch = None
try:
    from wit_world.imports.types import CallN_OnMatchN
except ImportError:  # a project's WIT from before the world plugin-n
    CallN_OnMatchN = None

SOURCE_KEY = "cojoin.python.app"


def _instantiate(cls):
    # The app's class leaves on_batch (on_batch_n) out (ours serves it), which wit_world.WitWorld
    # declares abstract in the world plugin-batched (plugin-n): a subclass marks it served.
    served = {
        name: None
        for name in ("on_batch", "on_batch_n")
        if name in getattr(cls, "__abstractmethods__", ())
    }
    if served:
        cls = type(cls.__name__, (cls,), {**served, "__module__": cls.__module__})
    return cls()


# componentize-py makes one WitWorld per export (init, on-match, on-expire, on-batch): the app's
# instance is shared through the module, and each of ours is pointed at it.
_app = _instantiate(app.WitWorld)
_ours = []


_CALLS = ("on_match", "on_expire", "on_match_n", "on_expire_n")


def _point(ours):
    # Bound methods as instance attributes: a call reaches the app with no extra frame. An app
    # defines the calls of its world only.
    for name in _CALLS:
        if hasattr(_app, name):
            setattr(ours, name, getattr(_app, name))


class WitWorld(wit_world.WitWorld):
    def __init__(self):
        _ours.append(self)
        _point(self)

    def init(self, config):
        global _app
        source = None
        rest = []
        for key, value in config:
            if key == SOURCE_KEY:
                source = value
            else:
                rest.append((key, value))
        if source is not None:
            module = types.ModuleType("app")
            module.__file__ = "app.py"
            try:
                exec(compile(source, "app.py", "exec"), module.__dict__)
                inner = _instantiate(module.WitWorld)
            except Exception as e:
                raise Err(f"app.py: {type(e).__name__}: {e} (a full `cojoin plugin build` after deleting build/.cojoin-base rebuilds everything)")
            sys.modules["app"] = module
            _app = inner
            for ours in _ours:
                _point(ours)
        return _app.init(rest)

    def on_match(self, key, a, b):
        return _app.on_match(key, a, b)

    def on_expire(self, key, event, side):
        return _app.on_expire(key, event, side)

    def on_match_n(self, key, events):
        return _app.on_match_n(key, events)

    def on_expire_n(self, key, event, partners):
        return _app.on_expire_n(key, event, partners)

    def on_batch(self, calls):
        # One result per call: what the app returned, or the Err it raised. Any other exception
        # fails the whole batch (a trap, as for one call); the host then makes the calls one by
        # one, so that only the failing one fails.
        results = []
        append = results.append
        on_match = _app.on_match
        on_expire = _app.on_expire
        for call in calls:
            args = call.value
            try:
                if type(call) is Call_OnMatch:
                    append(Ok(on_match(args.key, args.a, args.b)))
                else:
                    append(Ok(on_expire(args.key, args.event, args.side)))
            except Err as e:
                append(e)
        return results

    def on_batch_n(self, calls):
        # As on_batch, for the world plugin-n.
        results = []
        append = results.append
        on_match_n = _app.on_match_n
        on_expire_n = _app.on_expire_n
        for call in calls:
            args = call.value
            try:
                if type(call) is CallN_OnMatchN:
                    append(Ok(on_match_n(args.key, args.events)))
                else:
                    append(Ok(on_expire_n(args.key, args.event, args.partners)))
            except Err as e:
                append(e)
        return results
