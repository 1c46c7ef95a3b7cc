#!/usr/bin/env python3
"""Single-bit flips in every file of a database with indexes.

For each index strategy: `strata stress --small --ops N --index-strategy S`
builds a database (tables, WAL, MANIFEST and every index file of S); then,
for each of its files and F random bit positions in it, a copy of the
database gets that one bit flipped and `strata verify` checks it: every
key by scan, get and multi_get against the acknowledged state, and every
index against a full scan.

Each flip is classified by the verify run:
  clean     exit 0: the data and every index are exactly right (the bit
            was not read, or its damage was harmless)
  repaired  exit 0 with a warning: an index whose files failed their
            checks was rebuilt from the data at open (exact, and said)
  reported  exit 2: an error (corruption detected and reported)
  WRONG     exit 1: verify found wrong or missing data or a wrong index
            answer while no error was reported (a silent loss)
  PANIC     any other exit (a panic is 101, a signal is negative)
The target (reliability issue) is 0 WRONG and 0 PANIC.

usage: scripts/bitflip-campaign.py STRATA_BINARY [--flips-per-file F]
           [--ops N] [--strategies a,b,...] [--seed S] [--work DIR]
"""

import argparse
import collections
import os
import random
import shutil
import subprocess
import sys
import tempfile

STRATEGIES = "none,next,memory,embedded,composite,deli,posting-eager,posting-lazy,filter,perseid"


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def files_of(root):
    out = []
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            if n != "LOCK" and os.path.getsize(p) > 0:
                out.append(os.path.relpath(p, root))
    return sorted(out)


def campaign(binary, strategy, args, work):
    base = os.path.join(work, f"base-{strategy}")
    shutil.rmtree(base, ignore_errors=True)
    common = ["--seed", str(args.seed), "--keys", "300"]
    if strategy != "none":
        common += ["--index-strategy", strategy]
    stress = run([binary, "--db", base, "stress", "--small", "--ops", str(args.ops)] + common)
    if stress.returncode != 0:
        sys.exit(f"stress failed for {strategy}: {stress.stderr}")
    acked = os.path.join(work, f"acked-{strategy}")
    with open(acked, "w") as f:
        f.write(stress.stdout)
    ok = run([binary, "--db", base, "verify", "--acked", acked] + common)
    if ok.returncode != 0:
        sys.exit(f"verify of the undamaged database failed for {strategy}: {ok.stdout}{ok.stderr}")
    rng = random.Random(f"{args.seed}-{strategy}")
    counts = collections.Counter()
    bad = []
    files = files_of(base)
    for rel in files:
        size = os.path.getsize(os.path.join(base, rel))
        for _ in range(args.flips_per_file):
            bit = rng.randrange(size * 8)
            copy = os.path.join(work, f"copy-{strategy}")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(base, copy)
            path = os.path.join(copy, rel)
            with open(path, "r+b") as f:
                f.seek(bit // 8)
                b = f.read(1)[0]
                f.seek(bit // 8)
                f.write(bytes([b ^ (1 << (bit % 8))]))
            r = run([binary, "--db", copy, "verify", "--acked", acked] + common, timeout=120)
            kind = {0: "clean", 2: "reported", 1: "WRONG"}.get(r.returncode, "PANIC")
            if kind == "clean" and "rebuilt from the data at open" in r.stdout:
                kind = "repaired"
            counts[kind] += 1
            if kind in ("WRONG", "PANIC"):
                bad.append((rel, bit, r.returncode, (r.stdout + r.stderr)[-400:]))
    shutil.rmtree(os.path.join(work, f"copy-{strategy}"), ignore_errors=True)
    return files, counts, bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("binary")
    ap.add_argument("--flips-per-file", type=int, default=5)
    ap.add_argument("--ops", type=int, default=3000)
    ap.add_argument("--strategies", default=STRATEGIES)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--work")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="strata-bitflip-")
    total = collections.Counter()
    failures = []
    print(f"{'strategy':<14} {'files':>5} {'flips':>6} {'clean':>6} {'repaired':>8} {'reported':>8} "
          f"{'WRONG':>6} {'PANIC':>6}")
    for s in args.strategies.split(","):
        files, counts, bad = campaign(args.binary, s, args, work)
        total.update(counts)
        failures += [(s,) + b for b in bad]
        n = sum(counts.values())
        print(f"{s:<14} {len(files):>5} {n:>6} {counts['clean']:>6} {counts['repaired']:>8} "
              f"{counts['reported']:>8} "
              f"{counts['WRONG']:>6} {counts['PANIC']:>6}", flush=True)
    n = sum(total.values())
    print(f"{'total':<14} {'':>5} {n:>6} {total['clean']:>6} {total['repaired']:>8} "
          f"{total['reported']:>8} "
          f"{total['WRONG']:>6} {total['PANIC']:>6}")
    for s, rel, bit, rc, tail in failures:
        print(f"\n{s}: {rel} bit {bit}: exit {rc}\n{tail}")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
