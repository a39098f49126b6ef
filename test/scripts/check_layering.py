#!/usr/bin/env python3
"""Keeps the layers of docs/architecture.md: reads every #include "folder/..." of the product's
sources and fails, naming the file and line, when a layer includes one above it or beside it.

    core  <  data, model  <  fp8  <  parallel  <  checkpoint  <  app, tools

A layer includes itself and the layers below it; data and model do not include each other, nor
app and tools. parallel/pipeline/ (schedules as data) includes only core and itself. fuzz/ and
test/ sit above everything. Includes of system and library headers (<...>) are not read.

Within a layer it also refuses circles between the files of two folders: a file and the header
of the same name are one unit (x.h, x.cpp, x.cu, x.cuh), and no unit of one folder may reach
itself through units of another (parallel/mpi_runtime.cpp including comm/mpi_watchdog.h while
comm/mpi_watchdog.cpp includes parallel/mpi_runtime.h is such a circle); each circle is named by
its files. Inside one folder an interface and its implementations may include each other (a
factory in tokenizer.cpp); between folders the one seam allowed is core/cuda/backend.h, core's
interface to its CUDA backend (docs/architecture.md#departs-1).

    check_layering.py SOURCE_DIR
"""
import os
import re
import sys

LEVEL = {'core': 0, 'data': 1, 'model': 1, 'fp8': 2, 'parallel': 3, 'checkpoint': 4,
         'app': 5, 'tools': 5}
# A folder of a layer whose own rule is narrower than its layer's: what it may include.
NARROWER = {'parallel/pipeline': {'core', 'parallel/pipeline'}}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
SOURCE = ('.h', '.cpp', '.cu', '.cuh')
ORDER = 'core < data, model < fp8 < parallel < checkpoint < app, tools'


def included_layer(path):
    """The layer (or narrower folder) an include names, or None for a generated or local one."""
    top = path.split('/', 1)[0]
    return top if top in LEVEL else None


def violations(root):
    for layer in LEVEL:
        for folder, _, files in os.walk(os.path.join(root, layer)):
            rel_folder = os.path.relpath(folder, root)
            prefix = next((p for p in NARROWER
                           if rel_folder == p or rel_folder.startswith(p + '/')), None)
            narrower = NARROWER.get(prefix)
            for name in sorted(files):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.join(rel_folder, name)
                with open(os.path.join(root, path), encoding='utf-8') as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        other = included_layer(target)
                        if other is None:
                            continue
                        if narrower is not None:
                            if other not in narrower and not any(
                                    target.startswith(n + '/') for n in narrower):
                                yield (f'{path}:{number}: {prefix}/ includes "{target}", but it '
                                       f'includes only {", ".join(sorted(narrower))}/ (it needs '
                                       f'neither MPI nor the model: docs/architecture.md)')
                            continue
                        if other == layer:
                            continue
                        if LEVEL[other] >= LEVEL[layer]:
                            where = 'above' if LEVEL[other] > LEVEL[layer] else 'beside'
                            yield (f'{path}:{number}: {layer}/ includes "{target}", a layer '
                                   f'{where} it ({ORDER}); move what it needs down to {layer}/ '
                                   f'or below, or have the caller pass it in')


def unit_edges(root):
    """unit -> {included unit: the first 'file:line' that includes it}, over the layers."""
    edges = {}
    for layer in LEVEL:
        for folder, _, files in os.walk(os.path.join(root, layer)):
            for name in sorted(files):
                if not name.endswith(SOURCE):
                    continue
                path = os.path.relpath(os.path.join(folder, name), root)
                unit = os.path.splitext(path)[0]
                with open(os.path.join(root, path), encoding='utf-8') as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match or included_layer(match.group(1)) is None:
                            continue
                        other = os.path.splitext(match.group(1))[0]
                        if other != unit:
                            edges.setdefault(unit, {}).setdefault(other, f'{path}:{number}')
    return edges


SEAMS = {'core/cuda/backend'}


def circles(root):
    """One message per circle of units of several folders (Tarjan's strongly connected
    components of the units, less the seams)."""
    edges = {u: {o: w for o, w in out.items() if o not in SEAMS}
             for u, out in unit_edges(root).items() if u not in SEAMS}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(unit):
        index[unit] = low[unit] = len(index)
        stack.append(unit)
        on_stack.add(unit)
        for other in edges.get(unit, {}):
            if other not in index:
                visit(other)
                low[unit] = min(low[unit], low[other])
            elif other in on_stack:
                low[unit] = min(low[unit], index[other])
        if low[unit] == index[unit]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == unit:
                    break
            if len({os.path.dirname(m) for m in component}) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for unit in sorted(edges):
        if unit not in index:
            visit(unit)
    for component in found:
        members = set(component)
        links = sorted(where for unit in component
                       for other, where in edges.get(unit, {}).items() if other in members)
        yield (f'a circle of includes between {", ".join(component)}: {"; ".join(links)}; move '
               f'what both need into a file below both')


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    found = list(violations(root)) + list(circles(root))
    for line in found:
        print(line)
    if found:
        print(f'check_layering: {len(found)} finding(s) against the layers', file=sys.stderr)
        return 1
    print(f'check_layering: every include of {", ".join(LEVEL)} keeps the layers ({ORDER}), '
          f'and no files include each other in a circle')
    return 0


if __name__ == '__main__':
    sys.exit(main())
