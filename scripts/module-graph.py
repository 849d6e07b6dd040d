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
           "bench/src", "bench/src/main.rs", "examples/embedder/src", "examples/checklist/src/main.rs",
           "sync/src", "src", "examples/checklist/src", "lazyfs/src"]


def binary_modules(main):
    """A binary crate whose root is `main` (beside a library in the same folder): the root and
    the files it declares with `mod name;`, recursively."""
    src = os.path.dirname(main)
    out = {(): main}
    todo = [((), main)]
    while todo:
        mod, path = todo.pop()
        here = src if mod == () else os.path.splitext(path)[0]
        if os.path.basename(path) == "mod.rs":
            here = os.path.dirname(path)
        for child in re.findall(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;",
                                open(path, encoding="utf-8").read(), re.M):
            for cand in (os.path.join(here, child + ".rs"), os.path.join(here, child, "mod.rs")):
                if os.path.isfile(cand) and child != "tests":
                    out[mod + (child,)] = cand
                    todo.append((mod + (child,), cand))
                    break
    return out


def modules(src):
    """Maps module path (tuple) -> file."""
    if src.endswith(".rs"):
        return binary_modules(src)
    has_lib = os.path.isfile(os.path.join(src, "lib.rs"))
    out = {}
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, src)[:-3].split(os.sep)
            if rel[-1] == "mod":
                rel = rel[:-1]
            if rel == ["main"] and has_lib:
                continue  # a binary beside a library: its own crate (give its main.rs)
            if rel in (["lib"], ["main"]):
                rel = []
            if dirpath.startswith(os.path.join(src, "bin")):
                continue  # binaries are their own crates
            if rel and rel[-1] == "tests":
                continue
            out[tuple(rel)] = full
    return out


def strip(text):
    # Drop comments, strings and inline `#[cfg(test)] mod … { … }` bodies. One pass, left to
    # right, so a `//` inside a string and a quote inside a comment are read as what they are.
    # Raw strings (`r"…"`, `r#"…"#`, `br"…"`) start at a word boundary: the `r"` at the end
    # of `"owner"` is not one; a character literal such as `'"'` opens no string.
    token = re.compile(r'//[^\n]*|/\*.*?\*/|\bb?r(#*)"(?:.|\n)*?"\1|'
                       r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'', re.S)
    text = token.sub(lambda m: '""' if m.group(0)[:1] in 'rb"' else
                     ("' '" if m.group(0)[:1] == "'" else ""), text)
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


def expand(tree):
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"] (as lists of segments)."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, t):
        depth, parts, cur = 0, [], ""
        for ch in t:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        parts.append(cur)
        for part in parts:
            if not part:
                continue
            if "{" in part:
                head, rest = part.split("{", 1)
                walk(prefix + [x for x in head.split("::") if x], rest[:-1])
            else:
                out.append(prefix + [x for x in part.split("::") if x])

    walk([], tree)
    return out


def paths(text, mod):
    """Every path from `crate`/`super`/`self` in `text`, as absolute module-segment lists."""
    found = []
    for m in re.finditer(r"\buse\s+((?:crate|super|self)\s*::[^;]*);", text):
        for p in expand(m.group(1)):
            found.append(p)
    for m in re.finditer(r"\b(crate|super|self)((?:::\w+)+)", text):
        found.append([m.group(1)] + m.group(2).split("::")[1:])
    out = []
    for p in found:
        head, rest = p[0], p[1:]
        if head == "crate":
            base = tuple(rest)
        elif head == "self":
            base = mod + tuple(rest)
        else:
            up = mod[:-1]
            while rest and rest[0] == "super":
                up = up[:-1]
                rest = rest[1:]
            base = up + tuple(rest)
        out.append(base)
    return out


def reexports(mods):
    """module -> {name: module the name comes from}, from its `pub use` lines."""
    table = {}
    for mod, path in mods.items():
        text = strip(open(path, encoding="utf-8").read())
        names = {}
        for m in re.finditer(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]*);", text):
            for p in expand(m.group(1)):
                if not p:
                    continue
                if p[0] == "crate":
                    base = tuple(p[1:-1])
                elif p[0] == "self":
                    base = mod + tuple(p[1:-1])
                elif p[0] == "super":
                    base = mod[:-1] + tuple(p[1:-1])
                else:
                    base = mod + tuple(p[:-1])
                names[p[-1]] = base
        table[mod] = names
    return table


def resolve(mods, exports, base, depth=0):
    """The file that defines what `base` names: the longest module prefix, following `pub use`
    re-exports of the next segment."""
    cur = ()
    if () not in mods:
        return None
    for i, seg in enumerate(base):
        if cur + (seg,) in mods:
            cur = cur + (seg,)
            continue
        target = exports.get(cur, {}).get(seg)
        if target is not None and depth < 8:
            inner = resolve(mods, exports, target + tuple(base[i + 1:]), depth + 1)
            if inner is not None:
                return inner
        break
    return cur


def arrows(mods):
    exports = reexports(mods)
    edges = defaultdict(set)
    for mod, path in mods.items():
        text = strip(open(path, encoding="utf-8").read())
        for base in paths(text, mod):
            target = resolve(mods, exports, base)
            if target is not None and target != mod:
                edges[mod].add(target)
        # `child::x` for a child module this file declares (not `pub use child::…`, the index).
        body = re.sub(r"\bpub(?:\([^)]*\))?\s+use\s+[^;]*;", "", text)
        for child in re.findall(r"\bmod\s+(\w+)\s*;", text):
            cmod = mod + (child,)
            if cmod in mods and re.search(r"(?<![:\w])" + child + r"::", body):
                edges[mod].add(cmod)
        # A module's `pub use` of its own children is its index, not a dependency; other
        # re-exports are arrows.
        for name, src in exports.get(mod, {}).items():
            t = resolve(mods, exports, src + (name,))
            if t is not None and t != mod and t[:len(mod)] != mod:
                edges[mod].add(t)
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
        if not os.path.exists(full):
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
