"""seckill-load's sale (`seckill-load --json`) through nginx and both
instances: the line of one run and the medians of the runs, for
scripts/bench-sync (the synchronous mode, by ORDER_BATCH_MAX),
scripts/bench-async (the asynchronous mode against the no-op ceiling) and
scripts/bench-load (the course and red-packet scales).

    sync-line JSON                the line of one bench-sync run
    sync-medians OUT RUNS BATCH...  each ORDER_BATCH_MAX's medians; OUT/sync-summary.json
    async-line JSON               the line of one bench-async run (a ceiling's or a sale's)
    async-medians OUT RUNS        the medians; OUT/async-summary.json
    load-line JSON                the line of one bench-load run
"""
import sys

from hmdptools import cli
from hmdptools.medians import show, spread
from hmdptools.runs import dump, load, runs_of, total, verdict


def sync_line(d):
    t, a = total(d), d["audit"]
    wall = d["report"]["wallSecs"]
    return (f'wall={wall:.2f}s orders/s={a["newOrders"] / wall:.0f} p50={t["medianMs"]:.0f}ms p99={t["p99Ms"]:.0f}ms '
            f'success={a["successAnswers"]} oversold={a["oversold"]} duplicates={a["duplicatePairs"]} '
            f'balanced={a["stockPlusOrdersIsInitial"]} audit={verdict(a["passed"])}')


def sync_medians(out, runs_made, batches):
    """Each ORDER_BATCH_MAX's medians: (the lines, the summary)."""
    summary = {}
    lines = ["\nmedians of the runs (min-max)"]
    for batch in batches:
        runs = runs_of(out, f"sync-{batch}", runs_made)
        row = {"runs": len(runs),
               "wallSecs": spread([d["report"]["wallSecs"] for d in runs]),
               "ordersPerSec": spread([d["audit"]["newOrders"] / d["report"]["wallSecs"] for d in runs]),
               "p99Ms": spread([total(d)["p99Ms"] for d in runs]),
               "auditsPassed": sum(d["audit"]["passed"] for d in runs)}
        summary[batch] = row
        lines.append(f'ORDER_BATCH_MAX={batch}: wall {show(row["wallSecs"], " s")}, '
                     f'orders/s {show(row["ordersPerSec"], "", ",.0f")}, '
                     f'p99 {show(row["p99Ms"], " ms", ".0f")}, audits {row["auditsPassed"]} of {row["runs"]} passed')
    return lines, summary


def async_line(d):
    t = total(d)
    line = (f'wall={d["report"]["wallSecs"]:.2f}s req/s={t["throughputPerSec"]:.0f} '
            f'p50={t["medianMs"]:.0f}ms p99={t["p99Ms"]:.0f}ms')
    if "audit" in d:
        a, r = d["audit"], d["audit"].get("redis") or {}
        landed = d.get("rowsLandedSecs")
        line += (f' rows-landed={landed:.2f}s' if landed is not None else ' rows-landed=NOT')
        line += (f' success={a["successAnswers"]} oversold={a["oversold"]} duplicates={a["duplicatePairs"]}'
                 f' redis-stock={r.get("redisStock")} db-stock={a["remainingStock"]} audit={verdict(a["passed"])}')
    return line


def async_medians(out, runs_made):
    """The ceiling's and the sales' medians: (the lines, the summary)."""
    ceiling, sales = runs_of(out, "ceiling", runs_made), runs_of(out, "async", runs_made)
    summary = {
        "ceiling": {"runs": len(ceiling), "wallSecs": spread([d["report"]["wallSecs"] for d in ceiling]),
                    "requestsPerSec": spread([total(d)["throughputPerSec"] for d in ceiling])},
        "async": {"runs": len(sales), "wallSecs": spread([d["report"]["wallSecs"] for d in sales]),
                  "rowsLandedSecs": spread([d["rowsLandedSecs"] for d in sales
                                            if d.get("rowsLandedSecs") is not None]),
                  "p99Ms": spread([total(d)["p99Ms"] for d in sales]),
                  "auditsPassed": sum(d["audit"]["passed"] for d in sales if "audit" in d)},
    }
    c, a = summary["ceiling"], summary["async"]
    return [f'\nmedians of the runs (min-max): ceiling wall {show(c["wallSecs"], " s")}, '
            f'req/s {show(c["requestsPerSec"], "", ",.0f")}; '
            f'async wall {show(a["wallSecs"], " s")}, rows landed {show(a["rowsLandedSecs"], " s")}, '
            f'p99 {show(a["p99Ms"], " ms", ".0f")}, audits {a["auditsPassed"]} of {a["runs"]} passed'], summary


def load_line(d):
    rows = {r["label"]: r for r in d["report"]["rows"]}
    t, s, a = rows["TOTAL"], rows.get("success", {}), d["audit"]
    counts = " ".join(f'{k}={v["samples"]}' for k, v in rows.items() if k != "TOTAL")
    return (f'wall={d["report"]["wallSecs"]:.2f}s throughput={t["throughputPerSec"]:.0f}/s '
            f'orders/s={s.get("throughputPerSec", 0):.0f} '
            f'p50={t["medianMs"]:.0f}ms p95={t["p95Ms"]:.0f}ms p99={t["p99Ms"]:.0f}ms {counts} '
            f'oversold={a["oversold"]} duplicates={a["duplicatePairs"]} balanced={a["stockPlusOrdersIsInitial"]} '
            f'audit={verdict(a["passed"])}')


def _sync_medians(out, runs, *batches):
    lines, summary = sync_medians(out, int(runs), batches)
    cli.emit(lines)
    dump(summary, f"{out}/sync-summary.json")


def _async_medians(out, runs):
    lines, summary = async_medians(out, int(runs))
    cli.emit(lines)
    dump(summary, f"{out}/async-summary.json")


COMMANDS = {
    "sync-line": lambda path: print(sync_line(load(path))),
    "sync-medians": _sync_medians,
    "async-line": lambda path: print(async_line(load(path))),
    "async-medians": _async_medians,
    "load-line": lambda path: print(load_line(load(path))),
}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
