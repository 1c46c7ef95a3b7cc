#!/usr/bin/env python3
"""Fails if the modules of a Rust crate depend on each other in a cycle.

Usage: check-module-cycles.py CRATE_SRC_DIR [CRATE_SRC_DIR ...]

Every file is a module (`a/b.rs` and `a/b/mod.rs` are `a::b`). A module
depends on another when it names it through a `crate::` or `super::` path
outside comments and the `#[cfg(test)] mod tests` block; a parent and its
own children are not counted (a parent declares and re-exports them).
Prints each cycle (strongly connected component) with its edges; exits 1
if any crate has one.
"""
import os
import re
import sys


def modules(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] == "mod":
                parts = parts[:-1]
            if parts in (["lib"], ["main"]):
                continue
            files["::".join(parts)] = path
    return files


def source(path):
    text = open(path, encoding="utf-8").read()
    text = re.split(r"#\[cfg\(test\)\]\s*mod tests", text)[0]
    return "\n".join(l for l in text.split("\n") if not l.strip().startswith("//"))


def graph(files):
    def resolve(path):
        segs = [s for s in path.split("::") if s]
        for i in range(len(segs), 0, -1):
            m = "::".join(segs[:i])
            if m in files:
                return m
        return None

    g = {}
    for m, path in files.items():
        text = source(path)
        parent = "::".join(m.split("::")[:-1])
        prefix = {"crate": "", "super": parent + "::" if parent else ""}
        deps = set()
        for kind, rest in re.findall(r"\b(crate|super)::([a-z_][a-z_0-9:]*)", text):
            r = resolve(prefix[kind] + rest)
            if r:
                deps.add(r)
        for kind, base, inner in re.findall(
            r"use (crate|super)::([a-z_0-9:]*)\{([^}]*)\}", text, re.S
        ):
            for item in re.findall(r"([a-z_][a-z_0-9:]*)", inner):
                r = resolve(prefix[kind] + base + item) or resolve(prefix[kind] + base)
                if r:
                    deps.add(r)
        g[m] = {
            d
            for d in deps
            if d != m and not d.startswith(m + "::") and not m.startswith(d + "::")
        }
    return g


def cycles(g):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    failed = False
    for root in sys.argv[1:]:
        g = graph(modules(root))
        found = cycles(g)
        if not found:
            print(f"{root}: no module cycles among {len(g)} modules")
        for comp in found:
            failed = True
            print(f"{root}: cycle among {', '.join(comp)}")
            for m in comp:
                print(f"    {m} -> {', '.join(sorted(g[m] & set(comp)))}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
