"""The whole Python API, call by call."""

import json
import threading

import pytest

import strata


def test_import_and_constants():
    assert strata.__version__
    assert strata.STRATEGIES == [
        "next",
        "memory",
        "embedded",
        "composite",
        "deli",
        "posting-eager",
        "posting-lazy",
        "filter",
        "perseid",
    ]
    assert strata.TYPES == ["i64", "f64", "string", "point", "rect"]
    assert strata.Db.query.__doc__ and strata.open.__doc__


def test_put_get_delete_bytes_and_str(db):
    db.put(b"k1", b"v1")
    db.put("k2", "vé", sync=True)
    db.put(bytearray(b"k3"), bytearray(b"\x00\xff"))
    assert db.get("k1") == b"v1"
    assert db.get(b"k2") == "vé".encode()
    assert db.get("k3") == b"\x00\xff"
    assert db.get("missing") is None
    db.delete("k1")
    db.delete("never-there", sync=True)
    assert db.get("k1") is None


def test_mapping_protocol(db):
    db["a"] = "1"
    assert db["a"] == b"1"
    assert "a" in db and "b" not in db
    with pytest.raises(KeyError):
        db["b"]
    del db["a"]
    assert "a" not in db
    with pytest.raises(KeyError):
        del db["a"]
    db["x"] = "1"
    db["y"] = "2"
    assert list(db) == [b"x", b"y"]


def test_bad_key_types(db):
    with pytest.raises(TypeError):
        db.put(1, "v")
    with pytest.raises(TypeError):
        db.put("k", None)
    with pytest.raises(TypeError):
        db.get(3.5)


def test_write_batch_commits_and_discards(db):
    db["gone"] = "1"
    with db.write_batch() as b:
        b.put("a", "1")
        b.put(b"b", b"2")
        b.delete("gone")
        assert len(b) == 3
    assert db["a"] == b"1" and db["b"] == b"2" and "gone" not in db
    with pytest.raises(RuntimeError):
        with db.write_batch(sync=True) as b:
            b.put("c", "3")
            raise RuntimeError("abort")
    assert "c" not in db
    with pytest.raises(strata.ClosedError):
        b.put("d", "4")
    b2 = db.write_batch()
    b2.put("e", "5")
    b2.commit()
    assert db["e"] == b"5"
    with pytest.raises(strata.Error):
        b2.commit()


def test_scan_bounds_and_order(db):
    for i in range(500):
        db.put(f"k{i:04}", f"v{i}")
    db.flush()
    for i in range(0, 500, 3):
        db.delete(f"k{i:04}")
    got = list(db.scan())
    want = [(f"k{i:04}".encode(), f"v{i}".encode()) for i in range(500) if i % 3]
    assert got == want
    assert list(db.scan("k0100", "k0110")) == [kv for kv in want if b"k0100" <= kv[0] < b"k0110"]
    assert list(db.scan(start=b"k0490")) == [kv for kv in want if kv[0] >= b"k0490"]
    assert list(db.scan(end="k0005")) == [kv for kv in want if kv[0] < b"k0005"]
    assert list(db.scan("z")) == []


def test_snapshot_sees_the_past(db):
    db["a"] = "old"
    with db.snapshot() as s:
        db["a"] = "new"
        db["b"] = "added"
        assert s.get("a") == b"old" and s.get("b") is None
        assert list(s.scan()) == [(b"a", b"old")]
        assert isinstance(s.sequence, int)
    with pytest.raises(strata.ClosedError):
        s.get("a")
    assert db["a"] == b"new"


def test_scan_outlives_later_writes(db):
    for i in range(1000):
        db.put(f"{i:05}", "x" * 50)
    it = db.scan()
    first = next(it)
    for i in range(1000):
        db.delete(f"{i:05}")
    db.compact()
    assert first == (b"00000", b"x" * 50)
    assert sum(1 for _ in it) == 999


def records(n):
    for i in range(n):
        yield {
            "id": f"r{i:05}",
            "user": i % 10,
            "score": i / 4,
            "name": f"name{i % 13:02}",
            "loc": [i % 50 * 1.0, i % 20 * 1.0],
            "box": [i % 50, i % 20, i % 50 + 2.5, i % 20 + 1.5],
        }


def fill(db, n=300):
    for r in records(n):
        db.put(r["id"], json.dumps(r))


def test_indexes_create_list_query_drop(db):
    fill(db)
    db.create_index("user", "user", "i64")
    db.create_index("score", "score", "f64", strategy="memory")
    db.create_index("name", "name", "string", strategy="composite")
    db.create_index("loc", "loc", "point", strategy="embedded")
    db.create_index("box", "box", "rect", delta="auto")
    infos = {i["name"]: i for i in db.indexes()}
    assert set(infos) == {"user", "score", "name", "loc", "box"}
    assert infos["user"]["type"] == "i64" and infos["user"]["strategy"] == "next"
    assert infos["score"]["strategy"] == "memory" and infos["loc"]["field"] == "loc"
    assert infos["box"]["params"] == {"delta": "auto"}
    assert all(i["state"] == "ready" for i in infos.values())
    assert isinstance(infos["user"]["counters"]["queries"], int)

    hits = db.query("user", eq=3)
    assert [k for k, _ in hits] == [f"r{i:05}".encode() for i in reversed(range(300)) if i % 10 == 3]
    assert all(v["user"] == 3 for _, v in hits)
    assert len(db.query("user", eq=3, limit=4)) == 4
    assert db.query("user", eq=3, limit=2, keys_only=True) == [(b"r00293", None), (b"r00283", None)]
    assert len(db.query("score", range=(10, 20))) == 41
    assert len(db.query("score", eq=2.5)) == 1
    assert {v["name"] for _, v in db.query("name", range=("name03", "name04"))} == {"name03", "name04"}
    assert len(db.query("loc", within=(0, 0, 1, 1))) == sum(
        1 for r in records(300) if r["loc"][0] <= 1 and r["loc"][1] <= 1
    )
    assert len(db.query("box", within=(0, 0, 0, 0))) > 0
    assert db.query("box", eq=(0, 0, 2.5, 1.5), keys_only=True)[-1] == (b"r00000", None)

    db.drop_index("name")
    assert "name" not in {i["name"] for i in db.indexes()}
    with pytest.raises(KeyError):
        db.query("name", eq="name01")
    with pytest.raises(strata.NotFoundError):
        db.drop_index("name")


def test_query_sees_updates_and_deletes(db):
    fill(db, 100)
    db.create_index("user", "user", "i64")
    db.put("r00003", json.dumps({"user": 99}))
    db.delete("r00013")
    db["new"] = json.dumps({"user": 3})
    keys = [k for k, _ in db.query("user", eq=3)]
    assert keys[0] == b"new"
    assert b"r00003" not in keys and b"r00013" not in keys
    assert db.query("user", eq=99) == [(b"r00003", {"user": 99})]


def test_threads_do_not_change_answers(db):
    fill(db, 3000)
    db.create_index("user", "user", "i64")
    db.flush()
    for i in range(0, 3000, 7):
        db.put(f"r{i:05}", json.dumps({"user": i % 5}))
    db.delete("r00014")
    one = db.query("user", range=(0, 9), threads=1)
    assert len(one) > 100
    assert db.query("user", range=(0, 9), threads=3) == one
    assert db.query("user", range=(0, 9)) == one


def test_load_jsonl(db, tmp_path):
    p = tmp_path / "data.jsonl"
    lines = [json.dumps(r) for r in records(120)]
    p.write_text("\n".join(lines[:60]) + "\n\n" + "\n".join(lines[60:]) + "\n")
    assert db.load(p, key_field="id") == 120
    assert json.loads(db["r00007"]) == list(records(8))[7]
    db.create_index("user", "user", "i64")
    assert len(db.query("user", eq=1)) == 12
    numeric = tmp_path / "num.jsonl"
    numeric.write_text('{"n": 5, "x": 1}\n{"n": 6, "x": 2}\n')
    assert db.load(str(numeric), "n", batch=1) == 2
    assert db["5"] == b'{"n": 5, "x": 1}'


def test_load_errors(db, tmp_path):
    with pytest.raises(strata.IOError):
        db.load(tmp_path / "absent.jsonl", "id")
    with pytest.raises(OSError):
        db.load(tmp_path / "absent.jsonl", "id")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "a"}\n{oops\n')
    with pytest.raises(ValueError, match="line 2"):
        db.load(bad, "id")
    assert db["a"] == b'{"id": "a"}'
    nokey = tmp_path / "nokey.jsonl"
    nokey.write_text('{"other": 1}\n')
    with pytest.raises(ValueError, match="no string or number field"):
        db.load(nokey, "id")
    with pytest.raises(ValueError, match="unknown input format"):
        db.load(bad, "id", format="xml")
    # skip_bad loads the good records around a bad one.
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_text('{"id": "m1"}\n{oops\n{"id": "m2"}\n')
    assert db.load(mixed, "id", skip_bad=True) == 2
    assert db["m2"] == b'{"id": "m2"}'


def test_load_csv(db, tmp_path):
    p = tmp_path / "data.csv"
    p.write_text('id,user,name\nr1,7,"Ann, B."\nr2,8,"multi\nline"\nr3,9.5,x\n')
    assert db.load(p, "id", format="csv") == 3
    assert json.loads(db["r1"]) == {"id": "r1", "user": 7, "name": "Ann, B."}
    assert json.loads(db["r2"])["name"] == "multi\nline"
    db.create_index("user", "user", "f64")
    assert [k for k, _ in db.query("user", range=(7.5, 10))] == [b"r3", b"r2"]
    dup = tmp_path / "dup.csv"
    dup.write_text("id,a,a\nx,1,2\n")
    with pytest.raises(ValueError, match="appears twice"):
        db.load(dup, "id", format="csv")


def test_check_stats_flush_compact(db):
    fill(db, 200)
    db.create_index("user", "user", "i64")
    db.create_index("loc", "loc", "point", strategy="deli")
    db.flush()
    db.compact()
    assert db.check() is True
    s = db.stats()
    assert s["last_sequence"] >= 200
    assert isinstance(s["levels"], list) and "io" in s


def test_query_argument_errors(db):
    fill(db, 20)
    db.create_index("user", "user", "i64")
    db.create_index("score", "score", "f64")
    db.create_index("loc", "loc", "point")
    bad = [
        ("user", dict()),
        ("user", dict(eq=1, range=(1, 2))),
        ("user", dict(eq=1, within=(0, 0, 1, 1))),
        ("user", dict(range=(5, 1))),
        ("user", dict(range=(1, 2, 3))),
        ("user", dict(range="ab")),
        ("user", dict(eq="1")),
        ("user", dict(eq=1.5)),
        ("user", dict(eq=True)),
        ("user", dict(within=(0, 0, 1, 1))),
        ("user", dict(eq=1, limit=-1)),
        ("user", dict(eq=1, threads=0)),
        ("score", dict(eq=float("nan"))),
        ("score", dict(range=(2.0, 1.0))),
        ("loc", dict(range=(1, 2))),
        ("loc", dict(within=(1, 1, 0, 0))),
        ("loc", dict(within=(0, 0, 1))),
        ("loc", dict(eq=(1, 2, 3))),
    ]
    for index, kw in bad:
        with pytest.raises(ValueError):
            db.query(index, **kw)
        with pytest.raises(strata.InvalidArgumentError):
            db.query(index, **kw)
    assert db.query("score", eq=1) == db.query("score", eq=1.0)
    with pytest.raises(KeyError):
        db.query("nope", eq=1)


def test_create_index_errors(db):
    with pytest.raises(ValueError):
        db.create_index("a", "f", "int")
    with pytest.raises(ValueError):
        db.create_index("a", "f", "i64", strategy="btree")
    db.create_index("a", "f", "i64")
    with pytest.raises(ValueError):
        db.create_index("a", "g", "i64")
    with pytest.raises(strata.Error):
        db.create_index("b", "f", "i64", strategy="next", no_such_param="1")


def test_open_options_and_errors(tmp_path):
    with strata.open(tmp_path / "p", preset="paper", cache_size=1 << 20, block_size=8192) as db:
        db["a"] = "b"
        with pytest.raises(strata.Error):
            strata.open(tmp_path / "p")  # locked by the open handle
    assert db.closed
    with strata.open(str(tmp_path / "p"), create_if_missing=False) as db:
        assert db["a"] == b"b"
    with strata.open(tmp_path / "p", cache_doorkeeper=False) as db:
        assert db["a"] == b"b"
    with pytest.raises(ValueError):
        strata.open(tmp_path / "q", cache_doorkeeper=1)
    with pytest.raises(strata.Error):
        strata.open(tmp_path / "absent", create_if_missing=False)
    with pytest.raises(TypeError):
        strata.open(tmp_path / "q", no_such_option=1)
    with pytest.raises(ValueError):
        strata.open(tmp_path / "q", preset="huge")
    with pytest.raises(ValueError):
        strata.open(tmp_path / "q", cache_size=-1)
    with pytest.raises(ValueError):
        strata.open(tmp_path / "q", create_if_missing="yes")


def test_closed_database_raises(tmp_path):
    db = strata.open(tmp_path / "c")
    db["a"] = "1"
    snap = db.snapshot()
    db.close()
    db.close()
    assert "closed" in repr(db)
    for call in (lambda: db.get("a"), lambda: db.put("a", "b"), lambda: db.query("x", eq=1),
                 lambda: db.scan(), lambda: db.stats(), lambda: db["a"]):
        with pytest.raises(strata.ClosedError):
            call()
    assert snap.get("a") == b"1"
    snap.release()
    with strata.open(tmp_path / "c") as again:
        assert again["a"] == b"1"


def test_reopen_keeps_indexes(tmp_path):
    with strata.open(tmp_path / "r") as db:
        fill(db, 50)
        db.create_index("user", "user", "i64")
    with strata.open(tmp_path / "r") as db:
        assert [i["name"] for i in db.indexes()] == ["user"]
        assert len(db.query("user", eq=4)) == 5


def test_exception_hierarchy():
    assert issubclass(strata.CorruptionError, strata.Error)
    assert issubclass(strata.InvalidArgumentError, ValueError)
    assert issubclass(strata.NotFoundError, KeyError)
    assert issubclass(strata.IOError, OSError)
    assert issubclass(strata.ClosedError, strata.Error)


def test_corruption_is_reported(tmp_path):
    path = tmp_path / "bad"
    with strata.open(path, preset="small") as db:
        fill(db, 400)
        db.compact()
    tables = sorted(path.glob("*.sst"))
    assert tables
    for t in tables:
        data = bytearray(t.read_bytes())
        for off in range(100, len(data) // 2, 97):
            data[off] ^= 0xFF
        t.write_bytes(bytes(data))
    with pytest.raises(strata.Error) as e:
        with strata.open(path, preset="small") as db:
            db.check()
    assert isinstance(e.value, (strata.CorruptionError, strata.IOError))


def test_gil_released_during_queries(db):
    fill(db, 2000)
    db.create_index("loc", "loc", "point", strategy="embedded")
    errors = []

    def worker():
        try:
            for _ in range(20):
                assert len(db.query("loc", within=(0, 0, 49, 19), keys_only=True)) == 2000
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    ticks = 0
    while any(t.is_alive() for t in threads):
        ticks += 1
        db.put(f"tick{ticks}", "x")
    for t in threads:
        t.join()
    assert not errors
    assert ticks > 0


def test_query_leaves_the_garbage_collector_as_it_was(db):
    # Parsing many records pauses the cyclic collector; it must come back
    # in the state the caller left it, and the rows must be untouched.
    import gc

    for i in range(300):
        db.put(f"k{i:03}", json.dumps({"u": i % 2, "c": [i, {"n": i}]}))
    db.create_index("by_u", "u", "i64")
    assert gc.isenabled()
    rows = db.query("by_u", eq=1)
    assert gc.isenabled() and len(rows) == 150
    assert all(v["c"][1]["n"] == int(k[1:]) for k, v in rows)
    gc.disable()
    try:
        assert len(db.query("by_u", eq=0)) == 150
        assert not gc.isenabled()
    finally:
        gc.enable()
    raw = db.query("by_u", eq=1, raw=True)
    assert [k for k, _ in raw] == [k for k, _ in rows]
    assert all(json.loads(v) == d for (_, v), (_, d) in zip(raw, rows))
