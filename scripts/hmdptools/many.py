"""Many sales at once (`seckill-load crowd --vouchers N --json`), for
scripts/bench-many: the line of one sale, and per mode and number of
vouchers the medians of the runs against the one-voucher sale's.

    line JSON           the line of one sale (named after its file)
    medians OUT MODE... per mode and N, from OUT/MODE-vN-RUN.json; OUT/summary.json
"""
import glob
import os
import sys

from hmdptools import cli
from hmdptools.crowd import answered
from hmdptools.medians import ratio, spread
from hmdptools.runs import dump, load, name_of, wall


def line(d, name):
    return (f'{name}: vouchers={d["vouchers"]} wall={wall(d["rowsLandedSecs"])}s '
            f'last-answer={d["lastAnswerSecs"]:.3f}s ' + answered(d))


def medians(out, modes):
    """(the lines, the summary)."""
    summary = {}
    lines = ["\nmedians of the runs (spread min-max); ratio = median / the one-voucher sale's median",
             f'{"mode":6} {"vouchers":>8} {"runs":>4}  {"wall s":>18} {"ratio":>6}  {"p99 ms":>16} {"ratio":>6}  audits']
    for mode in modes:
        by_n = {}
        for path in glob.glob(os.path.join(out, f"{mode}-v*-*.json")):
            d = load(path)
            by_n.setdefault(d["vouchers"], []).append(d)
        base = None
        for n in sorted(by_n):
            runs = by_n[n]
            row = {
                "runs": len(runs),
                "wallSecs": spread([d["rowsLandedSecs"] for d in runs if d["rowsLandedSecs"] is not None]),
                "p99Ms": spread([d["p99Ms"] for d in runs]),
                "auditsPassed": sum(d["audit"]["passed"] for d in runs),
            }
            if n == 1:
                base = row
            if base and ratio(row["wallSecs"], base["wallSecs"]) is not None:
                row["wallRatio"] = ratio(row["wallSecs"], base["wallSecs"])
                row["p99Ratio"] = ratio(row["p99Ms"], base["p99Ms"])
            summary.setdefault(mode, {})[n] = row
            w, p = row["wallSecs"] or {"median": 0, "min": 0, "max": 0}, row["p99Ms"]
            lines.append(f'{mode:6} {n:>8} {row["runs"]:>4}  {w["median"]:6.2f} ({w["min"]:.2f}-{w["max"]:.2f}) '
                         f'{row.get("wallRatio", 0):5.2f}x  {p["median"]:5.0f} ({p["min"]:.0f}-{p["max"]:.0f}) '
                         f'{row.get("p99Ratio", 0):5.2f}x  {row["auditsPassed"]}/{row["runs"]} passed')
    return lines, summary


def _medians(out, *modes):
    lines, summary = medians(out, modes)
    cli.emit(lines)
    dump(summary, os.path.join(out, "summary.json"))


COMMANDS = {"line": lambda path: print(line(load(path), name_of(path))), "medians": _medians}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
