"""Stand-ins for the records of `cojoin:plugin/types` (wit/plugin.wit), as componentize-py
generates them: dataclasses, `bytes` for list<u8>, None for an absent option."""

from dataclasses import dataclass
from enum import Enum
from typing import List, Optional


@dataclass
class Header:
    key: str
    value: Optional[bytes]


@dataclass
class Event:
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes
    value: Optional[bytes]
    headers: List[Header]


@dataclass
class OutputRecord:
    topic: Optional[str]
    key: Optional[bytes]
    value: Optional[bytes]
    headers: List[Header]


class Side(Enum):
    LEFT = 0
    RIGHT = 1
