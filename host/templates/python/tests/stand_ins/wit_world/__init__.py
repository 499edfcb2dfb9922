"""Stand-in for the `wit_world` package componentize-py generates from wit/plugin.wit (tests only)."""


class WitWorld:
    """The world's exports: app.WitWorld implements init, on_match and on_expire."""
