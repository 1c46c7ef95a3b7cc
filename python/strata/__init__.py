"""Strata: an embedded LSM-tree key-value engine with first-class secondary
indexes, from Python.

    import strata

    with strata.open("/tmp/tweets") as db:
        db.load("tweets.jsonl", key_field="id")
        db.create_index("by_user", "user_id", "i64")
        db.create_index("by_place", "coordinates", "point")
        for key, tweet in db.query("by_place", within=(2.2, 48.8, 2.5, 48.9), limit=10):
            print(key, tweet["text"])

Keys and values are ``bytes`` or ``str`` (stored as UTF-8); reads return
``bytes``. Query results are ``(key, record)`` pairs, newest first, with the
record parsed from JSON. Errors derive from :class:`strata.Error`.
"""

from ._errors import (
    ClosedError,
    CorruptionError,
    Error,
    InvalidArgumentError,
    IOError,
    NotFoundError,
)
from ._strata import STRATEGIES, TYPES, Db, ScanIterator, Snapshot, WriteBatch, open

__version__ = "0.1.0"

__all__ = [
    "open",
    "Db",
    "Snapshot",
    "WriteBatch",
    "ScanIterator",
    "Error",
    "CorruptionError",
    "InvalidArgumentError",
    "NotFoundError",
    "IOError",
    "ClosedError",
    "STRATEGIES",
    "TYPES",
]
