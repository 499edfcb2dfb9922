"""Stand-in for `cojoin:plugin/host`: log lines are kept in `logged` for tests to read."""

from enum import Enum
from typing import List, Tuple


class Level(Enum):
    TRACE = 0
    DEBUG = 1
    INFO = 2
    WARN = 3
    ERROR = 4


logged: List[Tuple[Level, str]] = []


def log(level: Level, message: str) -> None:
    logged.append((level, message))
