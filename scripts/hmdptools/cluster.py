"""The local Redis Cluster's benches: scripts/bench-cluster (one Redis
against the cluster, both modes) and scripts/bench-segments (one voucher
in segments over the masters). Each run is a tab-separated row the script
appends to its results file; the table of the medians is read from it.

    cluster-row SETUP RUN JSON         one bench-cluster run's row
    cluster-table RESULTS              the medians per setup
    segments-row SEGMENTS RUN JSON LENDS [STOCK SPLIT_AT UNITS_LEFT]
                                       one bench-segments run's row (a sale the
                                       service split: when, and the units left then)
    segments-table RESULTS             the medians per number of segments
"""
import statistics
import sys

from hmdptools import cli
from hmdptools.runs import load, total, verdict


def rows_of(path):
    """A results file's rows, each a list of its tab-separated fields."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t") for line in f if line.strip()]


def by_first(rows):
    """The rows by their first field, in the order each first came."""
    return {key: [r for r in rows if r[0] == key] for key in dict.fromkeys(r[0] for r in rows)}


def median(rows, i):
    """The median of the rows' field I, as a number."""
    return statistics.median(float(r[i]) for r in rows)


def cluster_row(setup, run, d):
    t, a = total(d), d["audit"]
    return (f'{setup}\t{run}\t{d["report"]["wallSecs"]:.2f}\t{t["medianMs"]:.0f}\t{t["p99Ms"]:.0f}\t{a["successAnswers"]}'
            f'\t{a.get("unreplicatedAnswers", 0)}\t{verdict(a["passed"])}')


def cluster_table(rows):
    lines = ["\n| setup | runs | wall (median) | p50 (median) | p99 (median) | 200s | 202s | audits |",
             "|---|---|---|---|---|---|---|---|"]
    for setup, rs in by_first(rows).items():
        audits = "PASS" if all(r[7] == "PASS" for r in rs) else "FAIL"
        lines.append(f"| {setup} | {len(rs)} | {median(rs, 2):.2f} s | {median(rs, 3):.0f} ms | {median(rs, 4):.0f} ms | "
                     f"{median(rs, 5):.0f} | {median(rs, 6):.0f} | {audits} |")
    return lines


def segments_row(segments, run, d, lends, stock="", split_at="", units_left=""):
    t, a = total(d), d["audit"]
    cpu = {name: u["cpuSecs"] for name, u in d["cpu"].items()}
    # Each master by its port (`master-7001`).
    each = " ".join(f"{name[7:]}:{secs:.2f}" for name, secs in sorted(cpu.items()))
    # A sale the service split: seconds from the first request to the split
    # (its `split_at`, Redis's clock, against the load tool's), and the
    # share of the 200s sold before it (every unit was in segment 0 then).
    after, before = "-", "-"
    if split_at and units_left:
        after = f'{(int(split_at) - d["startedAtMs"]) / 1000:.2f}'
        before = f'{(int(stock) - int(units_left)) / max(a["successAnswers"], 1):.4f}'
    return (f'{segments}\t{run}\t{d["report"]["wallSecs"]:.2f}\t{t["p99Ms"]:.0f}\t{a["successAnswers"]}'
            f'\t{max(cpu.values()):.2f}\t{each}\t{lends}\t{t["samples"]}\t{verdict(a["passed"])}'
            f'\t{d["soldOutBeforeLastSale"]}\t{after}\t{before}')


def split_cells(rs):
    """The split's columns of a setup: when (median) and the share sold
    before it (median), or dashes for a setup the service did not split
    (rows of before this column have none)."""
    split = [r for r in rs if len(r) > 12 and r[11] != "-"]
    if not split:
        return "- | -"
    return f"{median(split, 11):.2f} s ({len(split)} of {len(rs)}) | {median(split, 12):.1%}"


def segments_table(rows):
    lines = ["\n| segments | runs | wall (median) | p99 (median) | 200s | busiest master CPU (median) | borrows / requests "
             "| SOLD_OUT before the last sale / requests | split after (median) | sold before the split (median) "
             "| audits |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    busiest = {}
    for segments, rs in by_first(rows).items():
        busiest[segments] = median(rs, 5)
        requests = sum(int(r[8]) for r in rs)
        borrows = sum(int(r[7]) for r in rs) / requests
        early = sum(int(r[10]) for r in rs) / requests
        audits = "PASS" if all(r[9] == "PASS" for r in rs) else "FAIL"
        lines.append(f"| {segments} | {len(rs)} | {median(rs, 2):.2f} s | {median(rs, 3):.0f} ms | {median(rs, 4):.0f} | "
                     f"{median(rs, 5):.2f} s | {borrows:.4%} | {early:.3%} | {split_cells(rs)} | {audits} |")
    for other, said in (("3", "3 segments"), ("auto", "split by the service")):
        if "1" in busiest and other in busiest:
            lines.append(f"\nbusiest master, {said} against 1: {busiest[other] / busiest['1']:.0%}")
    return lines


COMMANDS = {
    "cluster-row": lambda setup, run, path: print(cluster_row(setup, run, load(path))),
    "cluster-table": lambda path: cli.emit(cluster_table(rows_of(path))),
    "segments-row": lambda segments, run, path, lends, *split: print(segments_row(segments, run, load(path), lends,
                                                                                    *split)),
    "segments-table": lambda path: cli.emit(segments_table(rows_of(path))),
}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
