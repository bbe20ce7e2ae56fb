"""A long past (scripts/bench-past): the line of one sale, and the medians
of the start-ups and of the sales on the empty database and on the past,
with the past's over the empty one's.

    line JSON NAME      the line of one sale
    summary OUT MODE... from OUT/{empty,past}.start, OUT/MODE-DB-RUN.json and
                        OUT/sweep.secs; OUT/summary.json
"""
import glob
import os
import sys

from hmdptools import cli
from hmdptools.crowd import answered
from hmdptools.medians import ratio, show, spread
from hmdptools.runs import dump, load, wall


def line(d, name):
    return f'{name}: wall={wall(d["rowsLandedSecs"])}s ' + answered(d)


def summary(out, modes):
    """(the lines, the summary)."""
    result = {"startMs": {}}
    for db in ("empty", "past"):
        with open(os.path.join(out, f"{db}.start"), encoding="utf-8") as f:
            result["startMs"][db] = spread([float(x) for x in f.read().split()])
    e, p = result["startMs"]["empty"], result["startMs"]["past"]
    lines = [f'\nstart-up to /ready, ms: empty {show(e, "", runs=True)}, past {show(p, "", runs=True)}; '
             f'past / empty {ratio(p, e):.2f}x']
    for mode in modes:
        row = {}
        for db in ("empty", "past"):
            runs = [load(f) for f in sorted(glob.glob(os.path.join(out, f"{mode}-{db}-*.json")))]
            row[db] = {"wallSecs": spread([d["rowsLandedSecs"] for d in runs if d["rowsLandedSecs"] is not None]),
                       "p99Ms": spread([d["p99Ms"] for d in runs]),
                       "auditsPassed": sum(d["audit"]["passed"] for d in runs), "runs": len(runs)}
        for what, unit in (("wallSecs", "s"), ("p99Ms", "ms")):
            e, p = row["empty"][what], row["past"][what]
            if ratio(p, e) is not None:
                row[what + "Ratio"] = ratio(p, e)
            lines.append(f'{mode:5} {what:8} empty {show(e, unit, runs=True)}  past {show(p, unit, runs=True)}  '
                         f'past / empty {row.get(what + "Ratio", 0):.2f}x')
        lines.append(f'{mode:5} audits passed: empty {row["empty"]["auditsPassed"]}/{row["empty"]["runs"]}, '
                     f'past {row["past"]["auditsPassed"]}/{row["past"]["runs"]}')
        result[mode] = row
    if os.path.exists(os.path.join(out, "sweep.secs")):
        with open(os.path.join(out, "sweep.secs"), encoding="utf-8") as f:
            result["sweepSecs"] = float(f.read())
    return lines, result


def _summary(out, *modes):
    lines, result = summary(out, modes)
    cli.emit(lines)
    dump(result, os.path.join(out, "summary.json"))


COMMANDS = {"line": lambda path, name: print(line(load(path), name)), "summary": _summary}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
