#!/usr/bin/env python3
"""Keeps the links of README.md and docs/*.md true: every relative link names an existing file,
and its #anchor a heading of that file (by GitHub's rule: lowercase, punctuation dropped, spaces
to hyphens, -1, -2… for repeats) or an <a id="…"> in it, such as architecture.md#decision-7.
Links in code spans and fenced blocks are not links. Prints each broken one and exits 1.

    check_doc_links.py SOURCE_DIR
"""
import glob
import os
import re
import sys

FENCE = re.compile(r'^\s*```')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
EXPLICIT_ANCHOR = re.compile(r'<a\s+(?:id|name)="([^"]+)"')
LINK = re.compile(r'\]\(([^)\s]+)(?:\s+"[^"]*")?\)')


def prose_lines(path):
    """(line number, text) of the lines outside fenced blocks, code spans removed."""
    in_fence = False
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if not in_fence:
                yield number, line


def slug(heading):
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading.replace('`', '')).strip().lower()
    return ''.join(ch for ch in text if ch.isalnum() or ch in ' -_').replace(' ', '-')


def anchors(path, cache={}):
    if path not in cache:
        found, seen = set(), {}
        for _, line in prose_lines(path):
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                repeats = seen.get(base, 0)
                seen[base] = repeats + 1
                found.add(base if repeats == 0 else f'{base}-{repeats}')
            found.update(EXPLICIT_ANCHOR.findall(line))
        cache[path] = found
    return cache[path]


def main(source):
    pages = [os.path.join(source, 'README.md')]
    pages += sorted(glob.glob(os.path.join(source, 'docs', '*.md')))
    checked, broken = 0, 0
    for page in pages:
        for number, line in prose_lines(page):
            for target in LINK.findall(re.sub(r'`[^`]*`', '', line)):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target):  # https:, mailto:
                    continue
                checked += 1
                path, _, fragment = target.partition('#')
                dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
                where = f'{os.path.relpath(page, source)}:{number}: {target}'
                if not os.path.exists(dest):
                    print(f'{where}: no file {os.path.relpath(dest, source)}')
                    broken += 1
                elif fragment and dest.endswith('.md') and fragment not in anchors(dest):
                    page_name = os.path.relpath(dest, source)
                    print(f'{where}: no heading or <a id> "{fragment}" in {page_name}')
                    broken += 1
    print(f'{checked} relative links in {len(pages)} pages, {broken} broken')
    return 1 if broken or checked == 0 else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1]))
