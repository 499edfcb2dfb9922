"""Written by `cojoin plugin build`, rewritten at every full build: do not edit.

The component's entry point. It imports app.py at build time, so the interpreter snapshot that
componentize-py makes holds app.py and everything it imports, and it hands each call to
app.WitWorld. When only app.py changed since, `cojoin plugin build` reuses the component and
embeds the new source, which the host passes to init under SOURCE_KEY: init then runs that source
as the module app, and its WitWorld serves from then on.
"""

import sys
import types

import app
import wit_world
from componentize_py_types import Err

SOURCE_KEY = "cojoin.python.app"

# componentize-py makes one WitWorld per export (init, on-match, on-expire): the app's instance
# is shared through the module, and each of ours is pointed at it.
_app = app.WitWorld()
_ours = []


def _point(ours):
    # Bound methods as instance attributes: a call reaches the app with no extra frame.
    ours.on_match = _app.on_match
    ours.on_expire = _app.on_expire


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
                inner = module.WitWorld()
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
