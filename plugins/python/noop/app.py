"""Does nothing and returns nothing: the floor of a Python plugin's per-call cost."""

import wit_world


class WitWorld(wit_world.WitWorld):
    def init(self, config):
        pass

    def on_match(self, key, a, b):
        return []

    def on_expire(self, key, event, side):
        return []
