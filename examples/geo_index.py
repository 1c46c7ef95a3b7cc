"""Strata from Python: load a JSONL file of tweets, index it by place
(a point index) and by user (a numeric index), and query both.

    pip install ./python
    python examples/geo_index.py                 # a small generated data set
    python examples/geo_index.py tweets.jsonl    # or your own file, e.g. from
                                                 # strata gen tweets --records 200000 --out tweets.jsonl

Records are JSON objects with an "id" (the primary key), a "user_id" and
"coordinates" as [longitude, latitude].
"""

import json
import random
import sys
import tempfile
import time
from pathlib import Path

import strata

CITIES = {  # name: (longitude, latitude)
    "Paris": (2.35, 48.86),
    "New York": (-74.0, 40.71),
    "Tokyo": (139.69, 35.69),
    "São Paulo": (-46.63, -23.55),
}


def write_sample(path, n=20_000, seed=7):
    """A JSONL file of n tweets around a few cities."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            lon, lat = rng.choice(list(CITIES.values()))
            tweet = {
                "id": i,
                "user_id": int(rng.paretovariate(1.2)) % 5000,
                "coordinates": [round(lon + rng.gauss(0, 0.2), 5), round(lat + rng.gauss(0, 0.2), 5)],
                "text": f"tweet number {i}",
            }
            f.write(json.dumps(tweet) + "\n")


def main(argv):
    with tempfile.TemporaryDirectory(prefix="strata-example-") as tmp:
        run(Path(tmp), argv)


def run(work, argv):
    if len(argv) > 1:
        data = Path(argv[1])
    else:
        data = work / "tweets.jsonl"
        write_sample(data)

    with strata.open(work / "db") as db:
        t = time.perf_counter()
        n = db.load(data, key_field="id")
        print(f"loaded {n} records from {data} in {time.perf_counter() - t:.2f} s")

        db.create_index("place", "coordinates", "point")  # strategy "next" by default
        db.create_index("user", "user_id", "i64", strategy="memory")
        for info in db.indexes():
            print(f"index {info['name']}: {info['type']} on {info['field']}, {info['strategy']}, {info['state']}")

        # Spatial: the tweets within about 5 km of central Paris, newest first.
        lon, lat = CITIES["Paris"]
        window = (round(lon - 0.05, 2), round(lat - 0.05, 2), round(lon + 0.05, 2), round(lat + 0.05, 2))
        hits = db.query("place", within=window)
        print(f"{len(hits)} tweets in {window}; newest: {hits[0][1] if hits else None}")

        # Numeric: one user's ten latest tweets, then a range of users (keys only).
        user = db.query("user", eq=1, limit=10)
        print(f"user 1: {len(user)} latest tweets, keys {[k.decode() for k, _ in user[:5]]} ...")
        many = db.query("user", range=(10, 20), keys_only=True)
        print(f"users 10..20: {len(many)} tweets")

        # Records change: an update moves a tweet out of the window.
        if hits:
            key, tweet = hits[0]
            tweet["coordinates"] = [0.0, 0.0]
            db[key] = json.dumps(tweet)
            print(f"after moving {key.decode()}: {len(db.query('place', within=window))} tweets in the window")

        db.check()
        print(f"check ok; {db.stats()['table_bytes']} bytes in tables")


if __name__ == "__main__":
    main(sys.argv)
