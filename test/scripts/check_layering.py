#!/usr/bin/env python3
"""Keeps the layers of docs/architecture.md: reads every #include "folder/..." of the product's
sources and fails, naming the file and line, when a layer includes one above it or beside it.

    core  <  data, model  <  fp8  <  parallel  <  checkpoint  <  app, tools

A layer includes itself and the layers below it; data and model do not include each other, nor
app and tools. parallel/pipeline/ (schedules as data) includes only core and itself. fuzz/ and
test/ sit above everything. Includes of system and library headers (<...>) are not read.

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


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    found = list(violations(root))
    for line in found:
        print(line)
    if found:
        print(f'check_layering: {len(found)} include(s) against the layers', file=sys.stderr)
        return 1
    print(f'check_layering: every include of {", ".join(LEVEL)} keeps the layers ({ORDER})')
    return 0


if __name__ == '__main__':
    sys.exit(main())
