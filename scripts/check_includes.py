#!/usr/bin/env python3
"""Fails when an #include runs back up: between components (common <- store <- rendezvous <- agent <- apps;
store <- comm) or inside one (two files, or sub-folders, that include each other, directly or around a cycle),
and when a room of the agent includes the agent's top floor instead of its ground, agent/base/ (GROUND below).

A file's module is its path without the extension (x.hpp and x.cpp are one module). Usage:
check_includes.py [ROOT]; exit 0 when the graph is clean, 1 with every offending include (file:line) otherwise.
"""
import os
import re
import sys

# What each component may include besides itself (apps and tests may include anything).
ALLOWED = {
    "common": set(),
    "store": {"common"},
    "rendezvous": {"common", "store"},
    "agent": {"common", "store", "rendezvous"},
    "comm": {"common", "store"},
}
# A component with many sub-folders ("rooms") names one of them as their only common ground: a room may include
# that folder and other rooms (around no cycle), never a file of the component's top floor, which holds what
# orchestrates the rooms; the ground itself includes no other room.
GROUND = {"agent": "agent/base"}
SOURCE = re.compile(r"\.(c|cc|cpp|cu|h|hpp)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def modules(root):
    """{component: {module: [(path, line, included module)]}} for the components in ALLOWED."""
    graph = {}
    for comp in ALLOWED:
        for dirpath, _, names in os.walk(os.path.join(root, comp)):
            for name in sorted(names):
                if not SOURCE.search(name):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                mod = os.path.splitext(path)[0]
                edges = graph.setdefault(comp, {}).setdefault(mod, [])
                with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                    for number, text in enumerate(f, 1):
                        m = INCLUDE.match(text)
                        if m:
                            edges.append((path, number, m.group(1)))
    return graph


def cycles(nodes):
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(nodes[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in nodes:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(nodes[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                scc = []
                while True:
                    n = stack.pop()
                    on_stack.discard(n)
                    scc.append(n)
                    if n == node:
                        break
                if len(scc) > 1:
                    out.append(set(scc))
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    errors = []
    for comp, mods in sorted(modules(root).items()):
        inside = {}
        for mod, edges in mods.items():
            for path, line, target in edges:
                top = target.split("/", 1)[0]
                if top == comp:
                    inside.setdefault(mod, set()).add(os.path.splitext(target)[0])
                elif top in ALLOWED and top not in ALLOWED[comp]:
                    errors.append(f"{path}:{line}: {comp}/ includes {target}, a layer above it")
        for mod in mods:
            inside.setdefault(mod, set())
        ground = GROUND.get(comp)
        if ground:
            for mod in sorted(mods):
                folder = os.path.dirname(mod)
                if folder == comp:
                    continue
                for path, line, target in mods[mod]:
                    to = os.path.dirname(target)
                    if target.split("/", 1)[0] != comp or to == folder:
                        continue
                    if to == comp:
                        errors.append(f"{path}:{line}: {folder}/ includes {target}, a file of {comp}/'s top floor; "
                                      f"the rooms share only {ground}/")
                    elif folder == ground:
                        errors.append(f"{path}:{line}: {ground}/ includes {target}; the ground includes no room")
        # Sub-folders of one component (agent/logs, agent/process) must not include each other around a cycle
        # either.
        folders = {}
        for mod, targets in inside.items():
            for t in targets:
                a, b = os.path.dirname(mod), os.path.dirname(t)
                if a != b and a != comp and b != comp:
                    folders.setdefault(a, set()).add(b)
                    folders.setdefault(b, set())
        for scc in cycles(folders):
            for mod in sorted(mods):
                for path, line, target in mods[mod]:
                    a, b = os.path.dirname(mod), os.path.dirname(target)
                    if a != b and a in scc and b in scc:
                        errors.append(f"{path}:{line}: {a}/ includes {target}, and {b}/ includes {a}/ back")
        for scc in cycles(inside):
            for mod in sorted(scc):
                for path, line, target in mods[mod]:
                    if os.path.splitext(target)[0] in scc and os.path.splitext(target)[0] != mod:
                        errors.append(f"{path}:{line}: includes {target}, which includes back (cycle: "
                                      f"{', '.join(sorted(scc))})")
    for e in errors:
        print(e)
    if errors:
        print(f"{len(errors)} include(s) run back up; move the shared piece down (a header of its own) instead")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
