"""Server CPU per request (scripts/bench-cpu): each run's table of the
no-op against the order per setup, from the load tool's `--cpu` figures,
then (more than one run) the medians of the runs and their spread.

    table OUT SETUP...   from OUT/SETUP-{noop,sale,guarded}-rRUN.json, with RUNS (the
                         runs made) and GUARD (the guarded sale's guard, or empty)
                         in the environment; the tables on stdout, OUT/summary.json
"""
import os
import sys

from hmdptools import cli
from hmdptools.medians import show, spread
from hmdptools.runs import dump, load, total

GROUPS = ["instances", "nginx", "redis", "mariadb"]


def us(d, group):
    """A group's CPU per request, µs; 0 for a group the run did not count."""
    return d["cpu"].get(group, {"perRequestUs": 0})["perRequestUs"]


def all_us(d, groups):
    return sum(us(d, g) for g in groups)


def rate(d):
    return total(d)["throughputPerSec"]


def table(out, setups, run, runs_made, guard):
    """One run's table: (its lines, the groups it counted)."""
    groups = list(GROUPS)
    # The stack's NATS, in the -events setups.
    if any("nats" in load(f"{out}/{s}-sale-r{run}.json")["cpu"] for s in setups):
        groups.append("nats")
    lines = [f"\nRun {run} of {runs_made}. Server CPU per request, µs (seckill-load, the same keep-alive client for both; {out}):\n",
             "| setup | request | req/s | " + " | ".join(groups) + " | total | ÷ no-op | rate ÷ no-op's |",
             "|---|---|---:|" + "---:|" * (len(groups) + 3)]
    for setup in setups:
        runs = {kind: load(f"{out}/{setup}-{kind}-r{run}.json") for kind in ("noop", "sale")}
        noop = all_us(runs["noop"], groups)
        for kind, label in (("noop", "no-op GET /user/me"), ("sale", f"{setup.split('-')[0]} order")):
            d = runs[kind]
            cells = " | ".join(f"{us(d, g):.0f}" for g in groups)
            lines.append(f"| {setup} | {label} | {rate(d):,.0f} | {cells} | {all_us(d, groups):.0f} | "
                         f"{all_us(d, groups) / noop:.2f}x | {rate(d) / rate(runs['noop']):.0%} |")
        if guard:
            # Per buyer: every path request, challenge answer and the order.
            d = load(f"{out}/{setup}-guarded-r{run}.json")
            cells = " | ".join(f"{us(d, g):.0f}" for g in groups)
            lines.append(f"| {setup} | {guard} buyer: path step + order | (admitted {d['guarded']['admitPerSecond']}/s) | "
                         f"{cells} | {all_us(d, groups):.0f} | {all_us(d, groups) / noop:.2f}x | |")
            step = all_us(d, groups) - all_us(runs["sale"], groups)
            lines.append(f"| {setup} | the path step alone (buyer less order) | | | | | | {step:.0f} | {step / noop:.2f}x | |")
    for setup in setups:
        lag = load(f"{out}/{setup}-sale-r{run}.json").get("events")
        if lag:
            lines.append(f"\n{setup}: {lag['events']} order events published ({lag['unpublished']} not), lag from "
                         f"commit to ack p50 {lag['p50Ms']:.0f} ms, p99 {lag['p99Ms']:.0f} ms, max {lag['maxMs']:.0f} ms")
    return lines, groups


def medians(out, setups, runs_made, groups):
    """Every setup's no-op, order and order over no-op over the runs: (the
    lines, shown when there is more than one run, and the summary)."""
    summary = {"runs": runs_made, "setups": {}}
    for setup in setups:
        per_run = []
        for run in range(1, runs_made + 1):
            d = {kind: all_us(load(f"{out}/{setup}-{kind}-r{run}.json"), groups) for kind in ("noop", "sale")}
            per_run.append((d["noop"], d["sale"], d["sale"] / d["noop"]))
        summary["setups"][setup] = {
            "noopUs": spread([r[0] for r in per_run]),
            "orderUs": spread([r[1] for r in per_run]),
            "orderOverNoop": spread([r[2] for r in per_run]),
        }
    lines = []
    if runs_made > 1:
        lines += [f"\nMedians of {runs_made} runs (min-max), all servers' CPU per request, µs; the order over the no-op run by run:\n",
                  "| setup | no-op | order | order ÷ no-op |",
                  "|---|---:|---:|---:|"]
        for setup, row in summary["setups"].items():
            lines.append(f"| {setup} | {show(row['noopUs'], '', '.0f')} | {show(row['orderUs'], '', '.0f')} | "
                         f"{show(row['orderOverNoop'], 'x')} |")
    return lines, summary


def tables(out, setups, runs_made, guard):
    """Every run's table, then the medians: (the lines, the summary)."""
    lines = []
    for run in range(1, runs_made + 1):
        shown, groups = table(out, setups, run, runs_made, guard)
        lines += shown
    shown, summary = medians(out, setups, runs_made, groups)
    return lines + shown, summary


def _table(out, *setups):
    lines, summary = tables(out, setups, int(os.environ["RUNS"]), os.environ.get("GUARD"))
    cli.emit(lines)
    dump(summary, os.path.join(out, "summary.json"))


COMMANDS = {"table": _table}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
