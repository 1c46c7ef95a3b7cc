import pytest

import strata


@pytest.fixture
def db(tmp_path):
    """A fresh database with small memtables and levels, so that a few
    kilobytes of writes already flush and compact."""
    d = strata.open(tmp_path / "db", preset="small")
    yield d
    d.close()
