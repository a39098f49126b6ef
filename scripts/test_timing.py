#!/usr/bin/env python3
"""The timing table scripts/test.sh prints at its end.

    scripts/test_timing.py TIMING_DIR JOBS

TIMING_DIR holds phases.tsv (one line a phase: name, seconds, exit code, in the order they ran)
and the JUnit report of each ctest run (<tree>-<tier>.xml). The table gives each phase's time
(each tree's build and each tier's tests), then the ten slowest tests with their tree and tier.
"""
import datetime
import os
import platform
import sys
import xml.etree.ElementTree as ElementTree


def minutes(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    folder, jobs = sys.argv[1], sys.argv[2]
    phases = []
    with open(os.path.join(folder, "phases.tsv"), encoding="utf-8") as lines:
        for line in lines:
            name, seconds, code = line.rstrip("\n").split("\t")
            phases.append((name, int(seconds), int(code)))

    tests = []  # (seconds, report, name, status)
    for report in sorted(os.listdir(folder)):
        if not report.endswith(".xml"):
            continue
        try:
            root = ElementTree.parse(os.path.join(folder, report)).getroot()
        except ElementTree.ParseError:
            continue
        for case in root.iter("testcase"):
            status = "failed" if case.find("failure") is not None else (
                "skipped" if case.find("skipped") is not None else "passed")
            tests.append((float(case.get("time", 0)), report[:-4], case.get("name", "?"), status))

    when = datetime.datetime.now().strftime("%Y-%m-%d %H:%M")
    print(f"test: timing table ({when}, {platform.node()}, {os.cpu_count()} cores, "
          f"ctest -j {jobs})")
    print(f"  {'time':>8}  {'':6}  phase")
    for name, seconds, code in phases:
        verdict = "" if name == "total" else ("ok" if code == 0 else "FAILED")
        print(f"  {minutes(seconds):>8}  {verdict:6}  {name}")
    counts = {}
    for _, report, _, status in tests:
        counts.setdefault(report, {}).setdefault(status, 0)
        counts[report][status] += 1
    if counts:
        print("  tests run, by tree and tier:")
        for report, by_status in counts.items():
            summary = ", ".join(f"{n} {status}" for status, n in sorted(by_status.items()))
            print(f"  {'':18}{report}: {summary}")
    print("  the ten slowest tests:")
    for seconds, report, name, status in sorted(tests, reverse=True)[:10]:
        print(f"  {minutes(seconds):>8}  {report:18}  {name[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
