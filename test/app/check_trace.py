#!/usr/bin/python3
"""Checks a Chrome trace (the JSON Object Format that Perfetto and chrome://tracing open) the
way a viewer reads it, and prints what it holds as one JSON object:

    test/app/check_trace.py TRACE.json
    {"pids": [0], "spans": 1234, "names": {"step 5": 1, ...}, "categories": {"model": 300, ...},
     "collectives": [{"name": ..., "dims": ..., "bytes": ...}, ...], "nesting_errors": 0}

The structure is checked, not assumed: a top-level object with a "traceEvents" list; every
event has "ph", "pid", "tid" and "name"; complete events ("X") have numeric "ts" and "dur"
>= 0; spans on one track nest (a span that starts inside another ends inside it, as a viewer
needs to draw a flame graph). Violations: one line on stderr, exit 1. Independent of
titan_train's C++ (Python's own json module).
"""
import collections
import json
import sys


def fail(message):
    print(f"check_trace: error: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: check_trace.py TRACE.json")
    path = sys.argv[1]
    try:
        with open(path, encoding="utf-8") as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        fail(f"{path}: {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail(f"{path}: no traceEvents list at the top level")
    names = collections.Counter()
    categories = collections.Counter()
    collectives = []
    tracks = collections.defaultdict(list)
    pids = set()
    for i, e in enumerate(trace["traceEvents"]):
        for key in ("ph", "pid", "tid", "name"):
            if key not in e:
                fail(f"{path}: event {i} has no '{key}'")
        pids.add(e["pid"])
        if e["ph"] != "X":
            continue
        ts, dur = e.get("ts"), e.get("dur")
        if not isinstance(ts, (int, float)) or not isinstance(dur, (int, float)) or dur < 0:
            fail(f"{path}: span {i} ({e['name']}) has ts {ts!r} and dur {dur!r}")
        names[e["name"]] += 1
        categories[e.get("cat", "")] += 1
        args = e.get("args", {})
        if "bytes" in args:
            collectives.append({"name": e["name"], "dims": args.get("dims"),
                                "bytes": args["bytes"]})
        tracks[(e["pid"], e["tid"])].append((ts, ts + dur, e["name"]))
    # Nesting per track: sorted by start (longest first on ties), each span must end within
    # the innermost open span that contains its start. Timestamps are whole or fractional µs;
    # allow rounding of 1 µs.
    nesting_errors = 0
    for spans in tracks.values():
        spans.sort(key=lambda s: (s[0], -(s[1] - s[0])))
        open_ends = []
        for start, end, _ in spans:
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            if open_ends and end > open_ends[-1] + 1:
                nesting_errors += 1
            open_ends.append(end)
    print(json.dumps({"pids": sorted(pids), "spans": sum(names.values()), "names": names,
                      "categories": categories, "collectives": collectives,
                      "nesting_errors": nesting_errors}))


if __name__ == "__main__":
    main()
