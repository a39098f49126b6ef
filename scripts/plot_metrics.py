#!/usr/bin/python3
"""Draws the metrics.jsonl files of titan_train runs as one PNG chart.

titan_train writes one JSON object per logged step to the file named by the config key
`metrics.jsonl` (app/metrics/metrics_processor.h lists the keys). This script reads one or more
such files and draws, with every run on the same axes:

  - loss against step, with the validation loss as markers where a run reports `val_loss`;
  - loss against tokens trained, for runs whose lines carry `tokens` (the panel says so when
    none do: tokens cannot be recovered from the other keys);
  - throughput (`tokens_per_s_per_device`) against step;
  - peak memory (`peak_mem_gib`) against step;
  - grad norm and learning rate against step.

Unknown keys are ignored. A resumed run appends to the same file, so a step can appear more
than once: when a step comes again that is not after the last one, the run restarted there,
and the lines logged from that step on by the earlier attempt are dropped (the last occurrence
of a step wins). Lines of the same step that follow each other are merged (a validation line
after the training line of its step).

Usage:

  scripts/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] -o OUT.png [--label NAME ...] [--title TEXT]

  scripts/plot_metrics.py outputs/metrics.jsonl -o metrics.png
  scripts/plot_metrics.py runs/a/metrics.jsonl runs/b/metrics.jsonl -o compare.png \\
      --label baseline --label fp8 --title "debug model, 200 steps"

Runs are labelled by the --label values, in the order of the files, or else by the name of
each file's folder. Needs Debian's python3-matplotlib and python3-numpy (scripts/setup.sh
installs them). Bad input (a missing or empty file, a line that is not JSON, a file without
`step` and `loss`, an output that cannot be written) ends with one line on stderr and exit 2.
"""

import argparse
import json
import math
import os
import sys
from pathlib import Path

PROG = "plot_metrics.py"


class InputError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


def fail(message):
    print(f"{PROG}: error: {message}", file=sys.stderr)
    sys.exit(2)


class ArgumentParser(argparse.ArgumentParser):
    # argparse prints the usage and then the error; one line is the rule here.
    def error(self, message):
        fail(f"{message}; run {PROG} --help for the usage")


# ---------------------------------------------------------------------------------------------
# Reading


def number(value):
    """The value as a float when it is a JSON number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def read_run(path):
    """The records of one metrics.jsonl file, one dict per step, in step order."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path} does not exist; pass the metrics.jsonl a run wrote "
                         "(the config key metrics.jsonl)")
    if not path.is_file():
        raise InputError(f"{path} is not a file; pass the metrics.jsonl inside it")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path} cannot be read ({e}); check its permissions and that it "
                         "is a metrics.jsonl") from None

    by_step = {}  # step -> record; dicts keep insertion order, so steps stay in log order
    last_step = None
    saw_line = False
    for line_number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        saw_line = True
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path} line {line_number} is not JSON ({e.msg}); "
                             "fix or delete that line") from None
        if not isinstance(obj, dict):
            raise InputError(f"{path} line {line_number} is not a JSON object; every line "
                             "of a metrics.jsonl is one {...}; fix or delete that line")
        step = number(obj.get("step"))
        if step is None:
            continue  # not a step record: nothing to draw
        step = int(step)
        values = {k: v for k, v in ((k, number(v)) for k, v in obj.items()) if v is not None}
        if last_step is not None and step == last_step:
            by_step[step].update(values)  # more figures of the same step
        else:
            if last_step is not None and step < last_step:
                # A resumed run starts again from its checkpoint: its lines replace the
                # earlier attempt's from this step on.
                for s in [s for s in by_step if s >= step]:
                    del by_step[s]
            by_step[step] = values
        last_step = step

    if not saw_line:
        raise InputError(f"{path} is empty; pass a metrics.jsonl that a run has written "
                         "lines to (set metrics.jsonl and train at least metrics.log_freq steps)")
    records = sorted(by_step.values(), key=lambda r: r["step"])
    if not any("loss" in r for r in records):
        raise InputError(f"{path} has no lines with both 'step' and 'loss'; pass a titan_train "
                         "metrics.jsonl (the config key metrics.jsonl)")
    return records


def series(records, key, x="step"):
    """The (xs, ys) of the records that have both keys."""
    pairs = [(r[x], r[key]) for r in records if x in r and key in r and math.isfinite(r[key])]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def default_labels(paths):
    """Each file's folder name; the folder and file name where folders repeat."""
    labels = [Path(p).resolve().parent.name or str(p) for p in paths]
    if len(set(labels)) < len(labels):
        labels = [f"{Path(p).resolve().parent.name}/{Path(p).name}" for p in paths]
    return labels


# ---------------------------------------------------------------------------------------------
# Drawing


def draw(runs, out_path, title):
    """runs: a list of (label, records). Writes the PNG to out_path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    fig, axes = plt.subplots(3, 2, figsize=(12, 10.5), constrained_layout=True)
    (ax_loss, ax_tokens), (ax_tps, ax_mem), (ax_grad, ax_lr) = axes
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def panel(ax, key, ylabel, panel_title, x="step", xlabel="step", nothing=None):
        """One line per run of `key` against `x`; True when any run had the key, else the
        panel says `nothing`."""
        drawn = False
        for i, (label, records) in enumerate(runs):
            xs, ys = series(records, key, x)
            if xs:
                ax.plot(xs, ys, color=colors[i % len(colors)], linewidth=1.4, label=label)
                drawn = True
        ax.set_title(panel_title)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if not drawn:
            ax.set_xticks([])
            ax.set_yticks([])
            ax.text(0.5, 0.5, nothing or f"no run reports '{key}'", transform=ax.transAxes,
                    ha="center", va="center", color="gray")
        return drawn

    # Loss against step, validation loss as markers in the run's color.
    panel(ax_loss, "loss", "loss", "Loss")
    for i, (label, records) in enumerate(runs):
        xs, ys = series(records, "val_loss")
        if xs:
            ax_loss.plot(xs, ys, linestyle="none", marker="o", markersize=5,
                         color=colors[i % len(colors)], markeredgecolor="black",
                         markeredgewidth=0.6, label=f"{label} (validation)")
    ax_loss.legend(fontsize="small")

    # Loss against tokens, only for runs that log the cumulative `tokens`.
    if panel(ax_tokens, "loss", "loss", "Loss against tokens trained", x="tokens",
             xlabel="tokens", nothing="tokens unknown: the metrics lines have no 'tokens' key"):
        ax_tokens.xaxis.set_major_formatter(EngFormatter(sep=""))
        missing = [label for label, records in runs if not any("tokens" in r for r in records)]
        if missing:
            ax_tokens.text(0.98, 0.98, "tokens unknown for: " + ", ".join(missing),
                           transform=ax_tokens.transAxes, ha="right", va="top",
                           fontsize="small", color="gray")

    panel(ax_tps, "tokens_per_s_per_device", "tokens/s per device", "Throughput")
    ax_tps.yaxis.set_major_formatter(EngFormatter(sep=""))
    ax_tps.set_ylim(bottom=0)
    panel(ax_mem, "peak_mem_gib", "GiB", "Peak memory (busiest device)")
    ax_mem.set_ylim(bottom=0)
    panel(ax_grad, "grad_norm", "grad norm (before clipping)", "Gradient norm")
    panel(ax_lr, "lr", "learning rate", "Learning rate")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))

    fig.suptitle(title, fontsize="large")
    try:
        fig.savefig(out_path, format="png", dpi=100)
    except OSError as e:
        raise InputError(f"cannot write {out_path} ({e.strerror or e}); pick a writable path "
                         "with -o") from None
    finally:
        plt.close(fig)


def summary(label, records):
    """The run's label with its steps and, when logged, its time, for the title."""
    last = records[-1]
    text = f"{label}: {int(last['step'])} steps"
    if "elapsed_s" in last:
        text += f" in {last['elapsed_s']:.0f} s"
    return text


# ---------------------------------------------------------------------------------------------


def main(argv):
    parser = ArgumentParser(
        prog=PROG,
        description="Draw titan_train metrics.jsonl files (one or more runs) as a PNG chart.")
    parser.add_argument("files", nargs="+", metavar="METRICS.jsonl",
                        help="metrics.jsonl files; several draw several runs on the same axes")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.png",
                        help="the PNG to write")
    parser.add_argument("--label", action="append", default=[], metavar="NAME",
                        help="a run's name, once per file in order (default: the file's folder)")
    parser.add_argument("--title", help="the chart's title")
    args = parser.parse_args(argv)

    if args.label and len(args.label) != len(args.files):
        fail(f"{len(args.label)} --label values for {len(args.files)} files; "
             "give one --label per file, or none")
    out = Path(args.output)
    out_dir = out.parent if str(out.parent) else Path(".")
    if not out_dir.is_dir():
        fail(f"cannot write {out}: the folder {out_dir} does not exist; create it or pick "
             "another path with -o")
    if out.is_dir():
        fail(f"cannot write {out}: it is a folder; name a .png file with -o")

    try:
        import matplotlib  # noqa: F401
        import numpy  # noqa: F401  (matplotlib needs it; named so the message says both)
    except ImportError as e:
        fail(f"{e.name} is missing for {sys.executable}; install python3-matplotlib and "
             "python3-numpy (scripts/setup.sh does) and run the script as it is "
             "(its shebang is Debian's /usr/bin/python3)")

    try:
        labels = args.label or default_labels(args.files)
        runs = [(label, read_run(path)) for label, path in zip(labels, args.files)]
        title = args.title or "titan_train: " + "; ".join(summary(l, r) for l, r in runs)
        draw(runs, out, title)
    except InputError as e:
        fail(str(e))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
