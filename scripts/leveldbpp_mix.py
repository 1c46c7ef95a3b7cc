#!/usr/bin/env python3
"""Turn a chirp trace into LevelDB++'s workload mix (issue #17).

Usage: leveldbpp_mix.py SRC DST SEED

SRC is a trace written by `strata bench trace --format chirp` (its `w` lines
are kept in order, its reads dropped). After the first 1% of the writes,
each write is followed, with these probabilities, by one read:

- 2%: a GET (`rp`) of an `ID` written so far;
- 2%: a LOOKUP (`rs K`) of a `UserID` written so far;
- 1%: a RANGELOOKUP (`rs LO HI`) over 1/2000 of the `UserID` domain.

Replay with `strata bench replay DST --format chirp --top-k 10`.
"""

import json
import random
import sys


def main() -> None:
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    src, dst, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    with open(src) as f:
        writes = [line.rstrip("\n") for line in f if "\tw\t" in line]
    if not writes:
        sys.exit(f"{src}: no write lines")
    docs = [json.loads(w.split("\t", 2)[2]) for w in writes]
    lo_u = min(d["UserID"] for d in docs)
    hi_u = max(d["UserID"] for d in docs)
    width = max((hi_u - lo_u) // 2000, 1)
    warm = len(writes) // 100
    ids, uids, out = [], [], []
    for n, (line, doc) in enumerate(zip(writes, docs)):
        out.append(line)
        ids.append(doc["ID"])
        uids.append(doc["UserID"])
        if n < warm:
            continue
        ts = line.split("\t", 1)[0]
        r = rng.random()
        if r < 0.02:
            out.append(f"{ts}\trp\t{rng.choice(ids)}")
        elif r < 0.04:
            out.append(f"{ts}\trs\t{rng.choice(uids)}")
        elif r < 0.05:
            lo = rng.randint(lo_u, max(hi_u - width, lo_u))
            out.append(f"{ts}\trs\t{lo}\t{lo + width}")
    with open(dst, "w") as f:
        f.write("\n".join(out) + "\n")
    print(f"{len(writes)} writes, {len(out) - len(writes)} reads")


if __name__ == "__main__":
    main()
