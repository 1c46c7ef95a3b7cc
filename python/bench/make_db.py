"""Builds the database of the overhead measurement: a JSONL data set loaded
with Db.load, indexes on user_id (i64) and coordinates (point) with the
default strategy (next), then a full compaction.

    python python/bench/make_db.py TWEETS.jsonl DB
"""

import sys
import time

import strata


def main(argv):
    src, path = argv[1], argv[2]
    with strata.open(path, preset="paper", error_if_exists=True) as db:
        t = time.perf_counter()
        n = db.load(src, key_field="id")
        db.create_index("user_id", "user_id", "i64")
        db.create_index("coordinates", "coordinates", "point")
        db.compact()
        print(f"loaded {n} records and built 2 indexes in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":
    main(sys.argv)
