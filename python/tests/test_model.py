"""Property test: any sequence of operations leaves the database equal to a
dict that received the same operations (and a snapshot equal to the dict at
its time)."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import strata

keys = st.binary(min_size=1, max_size=6) | st.text(min_size=1, max_size=4)
values = st.binary(max_size=40) | st.text(max_size=20)


def b(x):
    return x.encode() if isinstance(x, str) else x


ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), keys, values),
        st.tuples(st.just("del"), keys),
        st.tuples(st.just("setitem"), keys, values),
        st.tuples(st.just("delitem"), keys),
        st.tuples(st.just("batch"), st.lists(st.tuples(keys, values | st.none()), max_size=5), st.booleans()),
        st.tuples(st.just("flush")),
        st.tuples(st.just("snapshot")),
    ),
    max_size=60,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops)
def test_db_behaves_like_a_dict(tmp_path_factory, ops):
    path = tmp_path_factory.mktemp("model")
    model = {}
    snaps = []
    with strata.open(path / "db", preset="small") as db:
        for op in ops:
            kind = op[0]
            if kind in ("put", "setitem"):
                _, k, v = op
                if kind == "put":
                    db.put(k, v)
                else:
                    db[k] = v
                model[b(k)] = b(v)
            elif kind == "del":
                db.delete(op[1])
                model.pop(b(op[1]), None)
            elif kind == "delitem":
                k = b(op[1])
                try:
                    del db[op[1]]
                    assert k in model
                    del model[k]
                except KeyError:
                    assert k not in model
            elif kind == "batch":
                _, items, fail = op
                try:
                    with db.write_batch() as wb:
                        for k, v in items:
                            if v is None:
                                wb.delete(k)
                            else:
                                wb.put(k, v)
                        if fail:
                            raise RuntimeError("discard")
                except RuntimeError:
                    pass
                if not fail:
                    for k, v in items:
                        if v is None:
                            model.pop(b(k), None)
                        else:
                            model[b(k)] = b(v)
            elif kind == "flush":
                db.flush()
            elif kind == "snapshot":
                snaps.append((db.snapshot(), dict(model)))
        assert list(db.scan()) == sorted(model.items())
        assert list(db) == sorted(model)
        for k, v in model.items():
            assert db[k] == v and k in db
        for s, m in snaps:
            assert list(s.scan()) == sorted(m.items())
            s.release()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(json_values, min_size=1, max_size=8))
def test_query_values_equal_json_loads(tmp_path_factory, docs):
    """Query results are parsed by the binding's own decoder: the same
    objects as json.loads of the stored bytes."""
    import json

    path = tmp_path_factory.mktemp("json")
    with strata.open(path / "db") as db:
        db.create_index("k", "k", "i64", strategy="memory")
        for i, d in enumerate(docs):
            db.put(f"{i:03}", json.dumps({"k": 1, "v": d, "ü\\n": [d]}))
        hits = db.query("k", eq=1)
        assert len(hits) == len(docs)
        for key, value in hits:
            raw = db[key]
            assert value == json.loads(raw)
        assert [v for _, v in db.query("k", eq=1, raw=True)] == [db[k] for k, _ in hits]
