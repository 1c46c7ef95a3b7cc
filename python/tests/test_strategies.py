"""Every strategy, on every key type, answers each query exactly like a
brute-force filter of the live records (newest first), through updates,
deletes, flushes and compactions."""

import json
import random

import pytest

import strata

FIELDS = {"i64": "n", "f64": "x", "string": "s", "point": "p", "rect": "r"}


def make_record(rng):
    """A record whose attributes are sometimes missing or of another type
    (those are not indexed)."""
    rec = {}
    if rng.random() < 0.9:
        rec["n"] = rng.randint(-20, 20)
    elif rng.random() < 0.5:
        rec["n"] = "not a number"
    if rng.random() < 0.9:
        rec["x"] = rng.choice([rng.uniform(-5, 5), rng.randint(-5, 5), 0.5])
    if rng.random() < 0.9:
        rec["s"] = rng.choice(["", "a", "ab", "b", "é", "zz", "b\u00e9"]) + str(rng.randint(0, 3))
    elif rng.random() < 0.5:
        rec["s"] = 7
    if rng.random() < 0.9:
        rec["p"] = [round(rng.uniform(0, 10), 1), round(rng.uniform(0, 10), 1)]
    if rng.random() < 0.9:
        x, y = rng.uniform(0, 10), rng.uniform(0, 10)
        rec["r"] = [x, y, x + rng.uniform(0, 2), y + rng.uniform(0, 2)]
    elif rng.random() < 0.5:
        rec["r"] = [1, 2]
    return rec


def attr(rec, ty):
    """The record's attribute as the index sees it, or None if not indexed."""
    v = rec.get(FIELDS[ty])
    if ty == "i64":
        return v if isinstance(v, int) and not isinstance(v, bool) else None
    if ty == "f64":
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    if ty == "string":
        return v if isinstance(v, str) else None
    if ty == "point":
        return v if isinstance(v, list) and len(v) == 2 else None
    return v if isinstance(v, list) and len(v) == 4 else None


def matches(v, ty, kind, arg):
    if kind == "eq":
        return v == (list(arg) if ty in ("point", "rect") else arg)
    if kind == "range":
        return arg[0] <= v <= arg[1]
    x1, y1, x2, y2 = arg
    if ty == "point":
        return x1 <= v[0] <= x2 and y1 <= v[1] <= y2
    return v[0] <= x2 and x1 <= v[2] and v[1] <= y2 and y1 <= v[3]


def queries(rng, ty, live):
    """Queries of each kind the type supports, some hitting stored values."""
    values = [a for a in (attr(r, ty) for r in live.values()) if a is not None]
    out = []
    for _ in range(6):
        if ty in ("point", "rect"):
            x, y = rng.uniform(-1, 10), rng.uniform(-1, 10)
            out.append(("within", (x, y, x + rng.uniform(0, 5), y + rng.uniform(0, 5))))
            if values:
                out.append(("eq", tuple(rng.choice(values))))
        else:
            if values:
                out.append(("eq", rng.choice(values)))
                a, b = sorted([rng.choice(values), rng.choice(values)])
                out.append(("range", (a, b)))
            if ty == "i64":
                out.append(("range", (-100, 100)))
    return out


@pytest.mark.parametrize("strategy", strata.STRATEGIES)
def test_strategy_matches_brute_force(tmp_path, strategy):
    rng = random.Random(strategy)
    db = strata.open(tmp_path / "db", preset="small")
    live = {}  # key -> (record, write number): newest first = highest write number
    order = {}
    writes = 0

    def write_some(n):
        nonlocal writes
        for _ in range(n):
            key = f"k{rng.randint(0, 150):04}"
            if rng.random() < 0.15:
                db.delete(key)
                live.pop(key, None)
            else:
                rec = make_record(rng)
                db.put(key, json.dumps(rec))
                live[key] = rec
                writes += 1
                order[key] = writes

    write_some(200)
    for ty, field in FIELDS.items():
        db.create_index(ty, field, ty, strategy=strategy)

    def check_all():
        for ty in FIELDS:
            for kind, arg in queries(rng, ty, live):
                want = sorted(
                    (k for k, r in live.items() if attr(r, ty) is not None and matches(attr(r, ty), ty, kind, arg)),
                    key=lambda k: -order[k],
                )
                got = db.query(ty, **{kind: arg})
                assert [k.decode() for k, _ in got] == want, (strategy, ty, kind, arg)
                assert all(v == live[k.decode()] for k, v in got)
                top = db.query(ty, **{kind: arg}, limit=3, keys_only=True)
                assert [k.decode() for k, _ in top] == want[:3]

    check_all()
    for step in range(4):
        write_some(150)
        if step == 1:
            db.flush()
        if step == 2:
            db.compact()
        check_all()
    assert db.check()
    db.close()
