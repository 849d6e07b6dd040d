#!/usr/bin/env python3
"""Counts import circles and upward arrows between the modules (files) of each crate.

A module is a source file (`a/mod.rs` is the module `a`). An arrow A -> B is a path in A that
names B: `crate::b::…`, `super::…`, `self::…`, or a child module A declares and uses. An
*upward arrow* is an arrow A -> B where B already depends on A (directly or not): the arrows
inside a strongly connected component. An *import circle* is such a component of two or more
modules. Inline test modules (`#[cfg(test)] mod tests { … }` in the same file) belong to their
file and are not counted; `tests.rs` files holding a parent's tests are left out too, since a
parent's tests must name the parent.

Usage: scripts/module-graph.py [--verbose] [crate-src-dir …]   (default: every crate's src/)
Prints one line per crate: modules, arrows, circles, upward arrows; exits 1 when any circle
exists and --check is given.
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT = ["model/src", "projections/src", "capabilities/src", "engine/src", "adapters/src",
           "sync/src", "src", "examples/checklist/src"]


def modules(src):
    """Maps module path (tuple) -> file."""
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel in (["lib"], ["main"]):
                rel = []
            if dirpath.startswith(os.path.join(src, "bin")):
                continue  # binaries are their own crates
            if rel and rel[-1] == "tests":
                continue
            out[tuple(rel)] = full
    return out


def strip(text):
    # Drop comments, strings and inline `#[cfg(test)] mod … { … }` bodies.
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    # Raw strings (`r"…"`, `r#"…"#`, `br"…"`) start at a word boundary: the `r"` at the end
    # of `"owner"` is not one.
    text = re.sub(r'\bb?r(#*)"(?:.|\n)*?"\1', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text)
    out, i = [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text):
        if m.start() < i:
            continue
        out.append(text[i:m.start()])
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        i = j
    out.append(text[i:])
    return "".join(out)


def resolve(mods, base):
    """Longest module prefix of `base` (a tuple) that is a file."""
    for n in range(len(base), -1, -1):
        if base[:n] in mods:
            return base[:n]
    return None


def reexports(mods, texts):
    """Maps (module, name) -> the path (tuple, from the crate root) a `pub use` in that module
    re-exports as `name`, so `crate::Name` counts as an arrow to the module defining `Name`
    rather than to the facade that re-exports it."""
    out = {}
    for mod, text in texts.items():
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
            body = re.sub(r"\s+", "", m.group(1))
            prefix, _, group = body.partition("::{")
            items = group.rstrip("}").split(",") if group else [None]
            for item in items:
                full = prefix if item is None else prefix + "::" + item
                if not full or full.endswith("*"):
                    continue
                path, _, alias = full.partition("as")
                parts = [p for p in path.split("::") if p]
                if not parts:
                    continue
                name = alias or parts[-1]
                if parts[0] == "crate":
                    base = tuple(parts[1:])
                elif parts[0] == "self":
                    base = mod + tuple(parts[1:])
                elif parts[0] == "super":
                    up, rest = mod[:-1], parts[1:]
                    while rest and rest[0] == "super":
                        up, rest = up[:-1], rest[1:]
                    base = up + tuple(rest)
                elif mod + (parts[0],) in mods:
                    base = mod + tuple(parts)  # a child module's item
                else:
                    continue  # another crate's item
                out[(mod, name)] = base
    return out


def resolve_through(mods, reexp, base):
    """Like `resolve`, then follows `pub use` re-exports of the item named after the module."""
    for _ in range(8):
        target = resolve(mods, base)
        if target is None or len(target) >= len(base):
            return target
        nxt = reexp.get((target, base[len(target)]))
        if nxt is None or nxt == base:
            return target
        base = nxt + base[len(target) + 1:]
    return resolve(mods, base)


def arrows(mods):
    edges = defaultdict(set)
    texts = {mod: strip(open(path, encoding="utf-8").read()) for mod, path in mods.items()}
    reexp = reexports(mods, texts)
    for mod, path in mods.items():
        text = texts[mod]
        for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", text):
            head, rest = m.group(1), m.group(2).split("::")[1:]
            if head == "crate":
                base = tuple(rest)
            elif head == "self":
                base = mod + tuple(rest)
            else:
                # `super` counts from the file's module; a file's `super::super` goes up twice.
                up = mod
                parts = list(rest)
                up = up[:-1]
                while parts and parts[0] == "super":
                    up = up[:-1]
                    parts = parts[1:]
                base = up + tuple(parts)
            target = resolve_through(mods, reexp, base)
            if target is not None and target != mod:
                edges[mod].add(target)
        # `use child::…` / `child::x` for a child module this file declares.
        for child in re.findall(r"\bmod\s+(\w+)\s*;", text):
            cmod = mod + (child,)
            if cmod in mods and re.search(r"(?<![:\w])" + child + r"::", text):
                edges[mod].add(cmod)
        # Plain `use name::…` where `name` is a sibling declared by the parent (2018 paths
        # from a file's own scope go through `crate`/`super`/`self`, so nothing else to do).
    return edges


def scc(nodes, edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in nodes:
        if v not in index:
            strong(v)
    return out


def name(m):
    return "::".join(m) or "crate"


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    verbose = "--verbose" in sys.argv
    check = "--check" in sys.argv
    total_circles = total_up = 0
    for src in args or DEFAULT:
        full = src if os.path.isabs(src) else os.path.join(ROOT, src)
        if not os.path.isdir(full):
            continue
        mods = modules(full)
        edges = arrows(mods)
        comps = [c for c in scc(list(mods), edges) if len(c) > 1]
        member = {m: i for i, c in enumerate(comps) for m in c}
        up = [(a, b) for a in edges for b in edges[a] if a in member and member.get(b) == member[a]]
        n_edges = sum(len(v) for v in edges.values())
        total_circles += len(comps)
        total_up += len(up)
        print(f"{src}: {len(mods)} modules, {n_edges} arrows, {len(comps)} circles, "
              f"{len(up)} arrows inside circles")
        if verbose:
            for c in comps:
                print("  circle:", ", ".join(sorted(name(m) for m in c)))
            for a, b in sorted(up):
                print(f"    {name(a)} -> {name(b)}")
    print(f"total: {total_circles} circles, {total_up} arrows inside circles")
    if check and total_circles:
        sys.exit(1)


if __name__ == "__main__":
    main()
