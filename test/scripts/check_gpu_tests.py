#!/usr/bin/env python3
"""Every CUDA op has a gpu test (ggml's rule: every backend op is tested on that backend): each
entry point of model/ops/*.cu, model/ops/attention/*.cu, fp8/cuda/*.cu and core/cuda/*.cu — a function the .cu defines at
namespace scope and a header of core/, model/ or fp8/ declares — must be named by a test of
test/gpu/, the binary whose every case carries the ctest label gpu: by its own name, or by the
name of the op that dispatches to it (rmsnorm_forward for rmsnorm_forward_cuda). Prints each
one that is not, with its file and line, and exits 1.

    check_gpu_tests.py SOURCE_DIR
"""
import glob
import os
import re
import sys

CUDA_FILES = ('model/ops/*.cu', 'model/ops/attention/*.cu', 'fp8/cuda/*.cu', 'core/cuda/*.cu')
HEADER_DIRS = ('core', 'model', 'fp8')
GPU_TESTS = 'test/gpu/*.cpp'
# A definition at namespace scope: a return type, the name, its parameters, at column 0.
DEFINITION = re.compile(r'^(?!static\b|template\b|namespace\b|struct\b|class\b|using\b|'
                        r'constexpr\b|inline\b|__global__\b|__device__\b|#|//|}|typedef\b)'
                        r'[A-Za-z_][\w:<>,\s\*&]*?\b([a-z_][a-z0-9_]*)\(')


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def anonymous_ranges(lines):
    """The line numbers inside `namespace {` … its closing brace."""
    inside, depth, start = set(), 0, None
    for number, line in enumerate(lines, 1):
        if start is None and re.match(r'^\s*namespace\s*\{', line):
            start, depth = number, 0
        if start is not None:
            depth += line.count('{') - line.count('}')
            inside.add(number)
            if depth == 0 and number > start:
                start = None
    return inside


def entry_points(root, declared):
    for pattern in CUDA_FILES:
        for path in sorted(glob.glob(os.path.join(root, pattern))):
            with open(path, encoding='utf-8') as f:
                lines = strip_comments(f.read()).split('\n')
            hidden = anonymous_ranges(lines)
            for number, line in enumerate(lines, 1):
                match = DEFINITION.match(line)
                if match and number not in hidden and match.group(1) in declared:
                    yield os.path.relpath(path, root), number, match.group(1)


def declared_names(root):
    names = set()
    for folder in HEADER_DIRS:
        for path in glob.glob(os.path.join(root, folder, '**', '*.h'), recursive=True):
            with open(path, encoding='utf-8') as f:
                names.update(re.findall(r'\b([a-z_][a-z0-9_]*)\(', strip_comments(f.read())))
    return names


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    named = set()
    for path in glob.glob(os.path.join(root, GPU_TESTS)):
        with open(path, encoding='utf-8') as f:
            named.update(re.findall(r'\b([a-z_][a-z0-9_]*)\s*\(', f.read()))
    missing, count = [], 0
    for path, number, name in entry_points(root, declared_names(root)):
        count += 1
        op = name[:-len('_cuda')] if name.endswith('_cuda') else name
        if name not in named and op not in named:
            missing.append(f'{path}:{number}: {name} is a CUDA entry point that no test of '
                           f'test/gpu/ names ({name}' + (f' or {op}' if op != name else '') +
                           '); add a case there that runs it against its CPU twin')
    for line in missing:
        print(line)
    if missing:
        print(f'check_gpu_tests: {len(missing)} of {count} CUDA entry points have no gpu test',
              file=sys.stderr)
        return 1
    print(f'check_gpu_tests: each of the {count} CUDA entry points has a gpu test that names it')
    return 0


if __name__ == '__main__':
    sys.exit(main())
