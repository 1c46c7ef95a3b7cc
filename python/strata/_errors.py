"""Exception classes of the strata package.

Every error the engine reports is a ``strata.Error``. Some also derive from
the built-in class a Python user would catch for them: bad arguments are a
``ValueError``, a missing index a ``KeyError``, an I/O failure an ``OSError``.
"""


class Error(Exception):
    """Base class of every error raised by strata."""


class CorruptionError(Error):
    """Bytes on disk failed a checksum or could not be decoded, or an index
    does not match the primary data (``Db.check``)."""


class InvalidArgumentError(Error, ValueError):
    """An argument was refused (unknown type or strategy, ``lo > hi``, two
    predicates at once, an oversized key, a bad JSONL line...). Nothing was
    changed."""


class NotFoundError(Error, KeyError):
    """A named thing (an index) does not exist."""


class IOError(Error, OSError):  # noqa: A001 - shadows the builtin alias on purpose
    """An operating-system I/O error."""


class ClosedError(Error):
    """The database, snapshot or write batch was closed (or the database is
    shutting down)."""


__all__ = [
    "Error",
    "CorruptionError",
    "InvalidArgumentError",
    "NotFoundError",
    "IOError",
    "ClosedError",
]
