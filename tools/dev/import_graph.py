#!/usr/bin/env python3
"""The files of each crate as rooms and their imports as arrows: circles and upward imports.

    python3 tools/dev/import_graph.py [--edges] [ROOT ...]

ROOT is a crate root file (default: every library and binary root of the workspace). The module
tree is walked from the root through `mod name;` declarations; every `crate::`, `super::` and
`self::` path in a file (in `use` items, grouped ones included, and inline in code; test
modules included, since they tie the files together too) is resolved to the longest module
prefix that is a file, and a path that lands on another file is an arrow. Circles are the
strongly connected components of more than one file. An arrow from `kernels/` or `frame/` into
`model/` or `tracking/` (tracker crate) is reported as upward. Exit status 1 if there is a circle
or an upward arrow. Reads text only (no rustc); `#[path]` attributes are not followed.
"""

import argparse
import os
import re
import sys

DEFAULT_ROOTS = [
    "memory-bank/src/lib.rs",
    "tracker/src/lib.rs",
    "pipeline/src/lib.rs",
    "plugins/src/lib.rs",
    "capi/src/lib.rs",
    "python/src/lib.rs",
    "src/lib.rs",
    "src/main.rs",
]
LOWER = ("kernels", "frame")
UPPER = ("model", "tracking")

MOD_DECL = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(r#)?(\w+)\s*;", re.M)
INLINE_MOD = re.compile(r"^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{")
PATH = re.compile(r"(?<![\w:(])((?:crate|super|self)(?:::(?:super|\w+))+)(::\{)?")


def strip_comments(text):
    """Blank out comments and string literals (kept line for line)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('"' + re.sub(r"[^\n]", " ", text[i + 1:j]) + '"')
            i = j + 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (i == 0 or not text[i - 1].isalnum()):
            m = re.match(r'r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:i + 4]):
            m = re.match(r"'(\\.|[^\\'])'", text[i:])
            out.append("' '")
            i += len(m.group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def walk(root):
    """Module path (tuple) -> file, from the root through `mod name;`."""
    mods = {(): root}
    stack = [((), root)]
    while stack:
        modpath, path = stack.pop()
        base = os.path.dirname(path)
        name = os.path.basename(path)
        if name not in ("lib.rs", "main.rs", "mod.rs"):
            base = os.path.join(base, name[:-3])
        text = strip_comments(open(path, encoding="utf-8").read())
        for m in MOD_DECL.finditer(text):
            child = m.group(2)
            for cand in (os.path.join(base, child + ".rs"), os.path.join(base, child, "mod.rs")):
                if os.path.exists(cand):
                    mods[modpath + (child,)] = cand
                    stack.append((modpath + (child,), cand))
                    break
    return mods


def expand_group(text, start):
    """The paths inside a `{ ... }` use group starting at text[start] == '{'."""
    depth, j = 0, start
    while j < len(text):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                break
        j += 1
    inner = text[start + 1:j]
    paths, depth, cur = [], 0, ""
    for ch in inner + ",":
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            cur = cur.strip()
            if cur:
                if "{" in cur:
                    head = cur[: cur.index("{")].rstrip(":").strip()
                    for sub in expand_group(cur, cur.index("{")):
                        paths.append((head + "::" + sub) if head else sub)
                else:
                    paths.append(re.split(r"\s+as\s+", cur)[0].strip())
            cur = ""
        else:
            cur += ch
    return paths


def inline_mod_at(text):
    """For each line, how many inline `mod x {` blocks enclose it."""
    depth_of_line, stack, depth = [], [], 0
    for line in text.split("\n"):
        depth_of_line.append(len(stack))
        opened = INLINE_MOD.match(line)
        for k, ch in enumerate(line):
            if ch == "{":
                depth += 1
                if opened and k == line.index("{", opened.start(1)):
                    stack.append(depth)
            elif ch == "}":
                if stack and stack[-1] == depth:
                    stack.pop()
                depth -= 1
    return depth_of_line


def resolve(segs, here, inline, mods):
    """The module path a `crate::` / `super::` / `self::` path names (longest file prefix)."""
    if segs[0] == "crate":
        cur, rest = (), segs[1:]
    else:
        cur, rest, skip = here, segs, inline
        while rest and rest[0] in ("super", "self"):
            if rest[0] == "super":
                if skip:
                    skip -= 1
                else:
                    cur = cur[:-1]
            rest = rest[1:]
    best = cur if cur in mods else None
    for k in range(len(rest)):
        cand = cur + tuple(rest[: k + 1])
        if cand in mods:
            best = cand
        else:
            break
    return best


USE_ITEM = re.compile(r"(?:^|[;{}\s])pub(?:\([^)]*\))?\s+use\s+([^;]+);")


def use_maps(mods):
    """Per module: name brought in by a `use` (alias included) -> its full path (segments)."""
    maps = {}
    for modpath, path in mods.items():
        text = strip_comments(open(path, encoding="utf-8").read())
        names = {}
        depth = inline_mod_at(text)
        for m in USE_ITEM.finditer(text):
            if depth[text.count("\n", 0, m.start())]:
                continue
            body = " ".join(m.group(1).split())
            if "{" in body:
                head = body[: body.index("{")].rstrip(":").strip()
                subs = [(head + "::" + s) if head else s for s in expand_group(body, body.index("{"))]
            else:
                subs = [body]
            for sub in subs:
                whole = sub
                alias = None
                parts = re.split(r"\s+as\s+", sub)
                if len(parts) == 2:
                    whole, alias = parts[0].strip(), parts[1].strip()
                segs = [x for x in whole.split("::") if x]
                if not segs or segs[-1] in ("*", "self"):
                    if segs and segs[-1] == "self" and len(segs) > 1:
                        names[alias or segs[-2]] = segs[:-1]
                    continue
                names.setdefault(alias or segs[-1], segs)
        maps[modpath] = names
    return maps


def resolve_through(segs, here, inline, mods, uses, depth=0):
    """Like `resolve`, then through the re-exports (`pub use`) of the module it lands on, to
    the file that defines the item."""
    t = resolve(segs, here, inline, mods)
    if t is None or depth > 8:
        return t
    # the segments after the module path
    if segs[0] == "crate":
        rest = segs[1 + len(t):]
    else:
        k = 0
        while k < len(segs) and segs[k] in ("super", "self"):
            k += 1
        base_len = len(t) - len(resolve_base(segs, here, inline))
        rest = segs[k + base_len:]
    if not rest:
        return t
    target = uses.get(t, {}).get(rest[0])
    if target is None or target[0] not in ("crate", "super", "self"):
        if target is not None and target[0] in [m[0] for m in mods if m]:
            # 2018 relative path from within the module (`pub use child::Item`)
            return resolve_through(["self"] + target + rest[1:], t, 0, mods, uses, depth + 1)
        return t
    return resolve_through(target + rest[1:], t, 0, mods, uses, depth + 1)


def resolve_base(segs, here, inline):
    if segs[0] == "crate":
        return ()
    cur, skip = here, inline
    for s in segs:
        if s == "super":
            if skip:
                skip -= 1
            else:
                cur = cur[:-1]
        elif s != "self":
            break
    return cur


TEST_MOD = re.compile(r"^\s*#\[cfg\(test\)\]\s*$")


def test_lines(text):
    """The lines inside `#[cfg(test)] mod name { ... }` blocks."""
    lines = text.split("\n")
    inside = [False] * len(lines)
    i = 0
    while i < len(lines):
        if TEST_MOD.match(lines[i]) and i + 1 < len(lines) and INLINE_MOD.match(lines[i + 1]):
            depth, j = 0, i + 1
            while j < len(lines):
                depth += lines[j].count("{") - lines[j].count("}")
                inside[j] = True
                if depth <= 0 and "{" in "".join(lines[i + 1 : j + 1]):
                    break
                j += 1
            i = j
        i += 1
    return inside


def edges_of(mods, no_tests=False):
    files = {v: k for k, v in mods.items()}
    uses = use_maps(mods)
    edges = {}
    for path, here in files.items():
        text = strip_comments(open(path, encoding="utf-8").read())
        inline_depth = inline_mod_at(text)
        in_test = test_lines(text) if no_tests else [False] * len(inline_depth)
        line_starts = [0]
        for m in re.finditer("\n", text):
            line_starts.append(m.end())
        import bisect

        for m in PATH.finditer(text):
            line = bisect.bisect_right(line_starts, m.start()) - 1
            if in_test[line]:
                continue
            base = m.group(1).split("::")
            if m.group(2):
                brace = m.end() - 1
                targets = [base + [s for s in sub.split("::") if s] for sub in expand_group(text, brace)]
            else:
                targets = [base]
            for segs in targets:
                if segs == ["self"] or not segs:
                    continue
                t = resolve_through(segs, here, inline_depth[line], mods, uses)
                if t is None or mods[t] == path:
                    continue
                edges.setdefault(path, {}).setdefault(mods[t], line + 1)
    return edges


def sccs(nodes, edges):
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
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
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("roots", nargs="*", default=DEFAULT_ROOTS)
    ap.add_argument("--edges", action="store_true", help="print every arrow")
    ap.add_argument(
        "--no-tests",
        action="store_true",
        help="leave out what `#[cfg(test)]` modules import (the library as it ships)",
    )
    args = ap.parse_args()
    bad = 0
    for root in args.roots:
        if not os.path.exists(root):
            continue
        mods = walk(root)
        edges = edges_of(mods, args.no_tests)
        if args.edges:
            for a in sorted(edges):
                for b, line in sorted(edges[a].items()):
                    print(f"{a}:{line} -> {b}")
        for comp in sccs(set(mods.values()), edges):
            bad += 1
            print(f"circle ({len(comp)} files): " + ", ".join(comp))
            for a in comp:
                for b, line in sorted(edges.get(a, {}).items()):
                    if b in comp:
                        print(f"    {a}:{line} -> {b}")
        for a in sorted(edges):
            for b, line in sorted(edges[a].items()):
                ra = os.path.relpath(a, os.path.dirname(root)).split(os.sep)[0]
                rb = os.path.relpath(b, os.path.dirname(root)).split(os.sep)[0]
                if root.startswith("tracker/") and ra in LOWER and rb in UPPER:
                    bad += 1
                    print(f"upward: {a}:{line} -> {b}")
    print("no circles, no upward imports" if bad == 0 else f"{bad} circles / upward imports")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
