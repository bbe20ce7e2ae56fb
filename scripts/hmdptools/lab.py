"""The strategy lab's runs (scripts/bench-lab, `hmdp-lab --save-json`):
the median per strategy over the runs, and every lock scenario's figures
run by run.

    medians OUT RUNS    from OUT/lab-1.json ... OUT/lab-RUNS.json
"""
import statistics
import sys

from hmdptools import cli
from hmdptools.runs import load


def strategies(reports):
    lines = ["| strategy | wall s (median) | min-max | orders/s | successes | stock left | refused (median by reason) "
             "| p50 ms | p99 ms | oversold | duplicates |",
             "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
    for i, first in enumerate(reports[0]["strategies"]):
        rows = [r["strategies"][i] for r in reports]

        def med(key):
            return statistics.median(row[key] for row in rows)
        walls = [row["wallMs"] / 1e3 for row in rows]
        reasons = sorted({why for row in rows for why in row["refusals"]})
        refused = ", ".join(f"{why} {statistics.median(row['refusals'].get(why, 0) for row in rows):.0f}"
                            for why in reasons) or "-"
        left = statistics.median(row["audit"]["stockLeft"] for row in rows)
        lines.append(f"| {first['name']} | {statistics.median(walls):.2f} | {min(walls):.2f}-{max(walls):.2f} | "
                     f"{med('ordersPerSec'):.0f} | {med('successes'):.0f} | {left:.0f} | {refused} | "
                     f"{med('p50Ms'):.1f} | {med('p99Ms'):.1f} | "
                     f"{'/'.join(str(row['audit']['oversold']) for row in rows)} | "
                     f"{'/'.join(str(row['audit']['duplicates']) for row in rows)} |")
    return lines


def locks(reports):
    lines = ["| lock scenario | per run |", "|---|---|"]
    for i, first in enumerate(reports[0]["locks"]):
        runs = [r["locks"][i] for r in reports]
        # The scenario's counts, in the report's order (not its flags).
        keys = [k for k in first if isinstance(first[k], (int, float)) and not isinstance(first[k], bool)]
        lines.append(f"| {first['name']} | " + " / ".join(", ".join(f"{k} {run[k]}" for k in keys) for run in runs) + " |")
    return lines


def medians(reports):
    return strategies(reports) + [""] + locks(reports)


def _medians(out, runs):
    cli.emit(medians([load(f"{out}/lab-{i}.json") for i in range(1, int(runs) + 1)]))


COMMANDS = {"medians": _medians}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
