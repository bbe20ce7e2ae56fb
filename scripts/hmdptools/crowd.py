"""The crowd at the opening instant (`seckill-load crowd --json`), for
scripts/bench-crowd: the line of one sale, against the same setting's
sale at the baseline's connections when given, and every setting's
medians over its runs. And the end of a crowd's line that bench-many and
bench-past share (`answered`).

    line JSON [BASELINE_JSON]   the line of one sale
    medians OUT                 every setting's medians, from OUT's NAME-RUN.json; OUT/summary.json
"""
import glob
import os
import re
import sys

from hmdptools import cli
from hmdptools.medians import show, spread
from hmdptools.runs import dump, load, name_of, verdict


def answered(d):
    """How a crowd's buyers were answered, as bench-many's and bench-past's
    lines end."""
    return (f'p50={d["p50Ms"]:.0f}ms p99={d["p99Ms"]:.0f}ms '
            f'answers={d["answers"]} unsold={d["unsold"]} audit={verdict(d["audit"]["passed"])}')


def line(d, baseline=None):
    a = d["audit"]
    text = (f'C={d["connections"]} p50={d["p50Ms"]:.0f}ms p99={d["p99Ms"]:.0f}ms max={d["maxMs"]:.0f}ms '
            f'sold-out={d["soldOutSecs"] or 0:.2f}s dropped={d["droppedInFlight"]} reopened={d.get("reopened", 0)} '
            f'outside-envelope={sum(d["outsideEnvelope"].values())} unsold={d["unsold"]} '
            f'retry-after-followed={d["retriesFollowed"]} answers={d["answers"]} audit={verdict(a["passed"])}')
    if baseline is not None and baseline.get("soldOutSecs") and d.get("soldOutSecs"):
        text += f' sell-out-vs-C={baseline["connections"]}: {d["soldOutSecs"] / baseline["soldOutSecs"]:.2f}x'
    return text


def medians(out):
    """Every setting's medians over its runs and their spread, from OUT's
    files alone (`SETTING-RUN.json`): (the lines, the summary)."""
    by_setting = {}
    for path in sorted(glob.glob(os.path.join(out, "*.json"))):
        name = name_of(path)
        match = re.fullmatch(r"(.+)-(\d+)", name)
        if not match or name == "summary":
            continue
        by_setting.setdefault(match.group(1), []).append(load(path))
    summary = {}
    lines = ["\nmedians of the runs (min-max)"]
    for setting, runs in by_setting.items():
        row = {"runs": len(runs),
               "p50Ms": spread([d["p50Ms"] for d in runs]),
               "p99Ms": spread([d["p99Ms"] for d in runs]),
               "soldOutSecs": spread([d["soldOutSecs"] for d in runs if d.get("soldOutSecs") is not None]),
               # Closed by the server under a request, or held and closed
               # between two: a sale loses both.
               "dropped": sum(d["droppedInFlight"] + d.get("reopened", 0) for d in runs),
               "outsideEnvelope": sum(sum(d["outsideEnvelope"].values()) for d in runs),
               "unsold": sum(d["unsold"] for d in runs),
               "auditsPassed": sum(d["audit"]["passed"] for d in runs)}
        summary[setting] = row
        lines.append(f'{setting}: p50 {show(row["p50Ms"], " ms", ".0f")}, p99 {show(row["p99Ms"], " ms", ".0f")}, '
                     f'sold out {show(row["soldOutSecs"], " s")}, dropped {row["dropped"]}, outside the envelope '
                     f'{row["outsideEnvelope"]}, unsold {row["unsold"]}, audits {row["auditsPassed"]} of {row["runs"]} passed')
    return lines, summary


def _line(path, baseline=None):
    print(line(load(path), load(baseline) if baseline is not None else None))


def _medians(out):
    lines, summary = medians(out)
    cli.emit(lines)
    dump(summary, os.path.join(out, "summary.json"))


COMMANDS = {"line": _line, "medians": _medians}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
