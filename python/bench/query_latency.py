"""Latency of one calibrated query set through the Python API: the same
queries, warm-up and timing as the Rust baseline
`cargo run --release -p strata --example query_latency` (see
python/bench/README.md for the whole measurement).

    python python/bench/query_latency.py DB INDEX QUERIES.json [ROUNDS] [keys_only|raw]

Modes: values parsed into dicts (default, the API's normal result),
keys_only, or raw (values as the stored bytes, which is what the Rust API
returns).
"""

import json
import statistics
import sys
import time

import strata


def predicate(q):
    if "range" in q:
        return {"range": tuple(q["range"])}
    if "window" in q:
        return {"within": tuple(q["window"])}
    return {"eq": q["lookup"]}


def main(argv):
    if len(argv) < 4:
        sys.exit(__doc__)
    db_path, index, queries = argv[1:4]
    rounds = int(argv[4]) if len(argv) > 4 else 5
    mode = argv[5] if len(argv) > 5 else "dicts"
    if mode not in ("dicts", "keys_only", "raw"):
        sys.exit(f"unknown mode {mode!r}")
    kw = {"keys_only": mode == "keys_only", "raw": mode == "raw"}
    with open(queries) as f:
        preds = [predicate(q) for q in json.load(f)["queries"]]
    with strata.open(db_path, preset="paper", create_if_missing=False) as db:
        query = db.query
        results = sum(len(query(index, **kw, **p)) for p in preds)
        times = []
        clock = time.perf_counter
        for _ in range(rounds):
            for p in preds:
                t = clock()
                hits = query(index, **kw, **p)
                times.append((clock() - t) * 1e6)
                del hits
    print(
        f"python index={index} queries={len(preds)} rounds={rounds} mode={mode} "
        f"mean_results={results / max(len(preds), 1):.1f} "
        f"median_us={statistics.median(times):.1f} mean_us={statistics.fmean(times):.1f}"
    )


if __name__ == "__main__":
    main(sys.argv)
