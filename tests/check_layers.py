#!/usr/bin/env python3
"""cuprof's include graph follows its layers (docs/architecture.md).

Every quoted or <cuprof/...> include in include/cuprof/, src/analysis/ and tools/
is resolved to a file; the check fails on an include cycle, on an include of a
higher layer, and on an include between two layers of the same rank (cupti/ and
output/ know nothing of each other). (That the installed headers need no
simdjson is the header check's: tests/support/not_installed/.) Layers, lowest first:

    base/ < model/ < collect/ < cupti/, output/ < the API headers < runtime/
          < cuprof.hpp < src/analysis/ < tools/

  python3 tests/check_layers.py            check the tree, exit 1 on a violation
  python3 tests/check_layers.py --graph    also print every layer-to-layer arrow
  python3 tests/check_layers.py --self-test
"""
import os
import re
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)

# (layer, rank): a file may include its own layer and lower ranks only.
LAYERS = [
    ("base", 0), ("model", 1), ("collect", 2), ("cupti", 3), ("output", 3),
    ("api", 4), ("runtime", 5), ("umbrella", 6), ("analysis", 7), ("tools", 8),
]
RANK = dict(LAYERS)


def layer_of(rel):
    """The layer of a repository-relative path, or None for files outside the layering."""
    if rel.startswith("include/cuprof/"):
        sub = rel[len("include/cuprof/"):]
        if "/" in sub:
            return sub.split("/", 1)[0]
        return "umbrella" if sub == "cuprof.hpp" else "api"
    if rel.startswith("src/analysis/"):
        return "analysis"
    if rel.startswith("tools/"):
        return "tools"
    return None


def resolve(root, rel, quote, target):
    """The repository-relative file an include names, or None (a system or third-party header)."""
    here = os.path.dirname(rel)
    candidates = []
    if quote == '"':
        candidates.append(os.path.normpath(os.path.join(here, target)))
    if target.startswith("cuprof/"):
        candidates += ["include/" + target, "src/analysis/include/" + target]
    for c in candidates:
        if os.path.isfile(os.path.join(root, c)):
            return c
    return None


def scan(root):
    """{file: [included files]} for every C++ file under the layered directories."""
    graph = {}
    for top in ("include/cuprof", "src/analysis", "tools"):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for n in sorted(names):
                if not n.endswith((".hpp", ".cpp", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, n), root)
                with open(os.path.join(root, rel), encoding="utf-8") as f:
                    text = f.read()
                deps = []
                for quote, target in INCLUDE.findall(text):
                    r = resolve(root, rel, quote, target)
                    if r:
                        deps.append(r)
                graph[rel] = deps
    return graph


def problems(graph):
    out = []
    for f, deps in sorted(graph.items()):
        lf = layer_of(f)
        for d in deps:
            ld = layer_of(d)
            if lf is None or ld is None or lf == ld:
                continue
            if RANK[ld] > RANK[lf]:
                out.append(f"{f}: includes {d}, a higher layer ({ld} above {lf})")
            elif RANK[ld] == RANK[lf]:
                out.append(f"{f}: includes {d}, a layer of the same rank ({ld} beside {lf})")
    # Cycles, by depth-first search over the file graph.
    state, stack = {}, []

    def visit(f):
        state[f] = 1
        stack.append(f)
        for d in graph.get(f, []):
            if state.get(d) == 1:
                out.append("include cycle: " + " -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[f] = 2

    for f in sorted(graph):
        if f not in state:
            visit(f)
    return out


def arrows(graph):
    seen = set()
    for f, deps in graph.items():
        for d in deps:
            a, b = layer_of(f), layer_of(d)
            if a and b and a != b:
                seen.add((a, b))
    return sorted(seen, key=lambda p: (RANK[p[0]], p[0], RANK[p[1]], p[1]))


class SelfTest(unittest.TestCase):
    def test_upward_include_is_reported(self):
        g = {"include/cuprof/base/log.hpp": ["include/cuprof/output/table.hpp"],
             "include/cuprof/output/table.hpp": []}
        self.assertTrue(any("higher layer" in p for p in problems(g)))

    def test_peer_layers_are_reported(self):
        g = {"include/cuprof/cupti/tracer.hpp": ["include/cuprof/output/table.hpp"],
             "include/cuprof/output/table.hpp": []}
        self.assertTrue(any("same rank" in p for p in problems(g)))

    def test_cycle_is_reported(self):
        g = {"include/cuprof/collect/a.hpp": ["include/cuprof/collect/b.hpp"],
             "include/cuprof/collect/b.hpp": ["include/cuprof/collect/a.hpp"]}
        self.assertTrue(any(p.startswith("include cycle") for p in problems(g)))

    def test_downward_includes_pass(self):
        g = {"include/cuprof/cuprof.hpp": ["include/cuprof/runtime/runtime.hpp", "include/cuprof/profile.hpp"],
             "include/cuprof/runtime/runtime.hpp": ["include/cuprof/profile.hpp"],
             "include/cuprof/profile.hpp": ["include/cuprof/output/table.hpp"],
             "include/cuprof/output/table.hpp": ["include/cuprof/model/event.hpp", "include/cuprof/base/text.hpp"],
             "include/cuprof/model/event.hpp": [], "include/cuprof/base/text.hpp": []}
        self.assertEqual(problems(g), [])

    def test_the_tree_resolves_includes(self):
        g = scan(ROOT)
        self.assertIn("include/cuprof/collect/thread_buffer.hpp", g["include/cuprof/record_function.hpp"])


def main(argv):
    if "--self-test" in argv:
        return 0 if unittest.main(argv=[argv[0]], exit=False).result.wasSuccessful() else 1
    graph = scan(ROOT)
    if "--graph" in argv:
        for a, b in arrows(graph):
            print(f"{a} -> {b}")
    found = problems(graph)
    for p in found:
        print(p)
    print(f"check_layers: {len(graph)} files, {sum(map(len, graph.values()))} includes, "
          f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
