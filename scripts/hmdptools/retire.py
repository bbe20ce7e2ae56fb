"""Nothing grows with the past (scripts/bench-retire): the bench's sales
whose keys are still in Redis after they ended, and the points the script
took (Redis's memory and keys, each instance's RSS) against the baseline.

    leaving OUT MODE SALE_SECONDS   how many of MODE's sales (OUT/MODE-*.json's
                                    voucherIds) still have keys in Redis (REDIS_URL,
                                    REDIS_KEY_PREFIX), after the newest crowd's sales
                                    ended and at most a minute more
    summary OUT WARM MODE...        from OUT/MODE-SALES.point; OUT/summary.json;
                                    exits 1 on a problem
"""
import glob
import os
import re
import subprocess
import sys
import time

from hmdptools import cli
from hmdptools.runs import dump, load

TAG = re.compile(r"\{(\d+)\}")


def sales_of(out, mode):
    """The voucher ids of MODE's crowds, and when the newest crowd's file
    was written (0: none)."""
    ids = set()
    crowds = glob.glob(os.path.join(out, f"{mode}-*.json"))
    for path in crowds:
        ids.update(load(path).get("voucherIds", []))
    return ids, max((os.path.getmtime(p) for p in crowds), default=0)


def keys_left(keys, ids):
    """The keys of the given sales: their hash tag (`{ID}`) names one."""
    return [k for k in keys if (m := TAG.search(k)) and int(m.group(1)) in ids]


def scan_redis():
    pattern = os.environ.get("REDIS_KEY_PREFIX", "") + "seckill:*"
    return subprocess.run(["redis-cli", "-u", os.environ["REDIS_URL"], "--scan", "--pattern", pattern],
                          capture_output=True, text=True, check=True).stdout.split()


def leaving(out, mode, sale_secs, scan=scan_redis, clock=time.time, sleep=time.sleep, patience=60):
    """How many keys of MODE's sales are left once the newest crowd's sales
    ended (each SALE_SECS after its opening, which came before its file
    was written), polled every second for at most PATIENCE seconds."""
    ids, newest = sales_of(out, mode)
    sleep(max(0.0, newest + sale_secs - clock()))
    deadline = clock() + patience
    while True:
        left = keys_left(scan(), ids)
        if not left or clock() > deadline:
            return len(left)
        sleep(1)


def points_of(out, mode):
    """MODE's points, by their number of sales."""
    points = []
    for path in glob.glob(os.path.join(out, f"{mode}-*.point")):
        with open(path, encoding="utf-8") as f:
            sales, used, dbsize, sessions, left, *rss = f.read().split()
        points.append({"sales": int(sales), "redisUsedMemory": int(used), "redisKeys": int(dbsize),
                       "sessions": int(sessions), "saleKeysLeft": int(left), "instanceRssKib": [int(r) for r in rss]})
    points.sort(key=lambda p: p["sales"])
    return points


def judge(mode, points, warm):
    """MODE's points against the baseline: (the lines, the summary's row)."""
    lines = [f"\n{mode}: the instances fresh, then after every fifth round's sales ended and left",
             f'{"sales":>6} {"redis used_memory":>18} {"redis keys":>10} {"of them sessions":>16} {"sale keys left":>14}  '
             'instances RSS (KiB)']
    for p in points:
        lines.append(f'{p["sales"]:>6} {p["redisUsedMemory"]:>18,} {p["redisKeys"]:>10,} {p["sessions"]:>16,} '
                     f'{p["saleKeysLeft"]:>14}  ' + " ".join(f"{r:,}" for r in p["instanceRssKib"]))
    # The baseline: the warm-up's sales ended and left; what grows after it
    # grows with the past.
    base, last = next((p for p in points if p["sales"] == warm), points[1]), points[-1]
    ratios = {"redisUsedMemory": last["redisUsedMemory"] / base["redisUsedMemory"],
              "instanceRss": [a / b for a, b in zip(last["instanceRssKib"], base["instanceRssKib"])]}
    lines.append(f'{last["sales"]} sales against {base["sales"]}: instances RSS '
                 + ", ".join(f"{r:.3f}x" for r in ratios["instanceRss"])
                 + f'; redis used_memory {ratios["redisUsedMemory"]:.3f}x (the load tool\'s sessions, '
                 f'{last["sessions"]:,}, last 30 minutes)')
    problems = [f'{p["saleKeysLeft"]} keys of ended sales left after {p["sales"]} sales' for p in points if p["saleKeysLeft"]]
    if any(r > 1.10 for r in ratios["instanceRss"]):
        problems.append("an instance's RSS grew more than 10 %")
    lines += [f"PROBLEM ({mode}): {problem}" for problem in problems]
    return lines, {"points": points, "baselineSales": base["sales"], "lastOverBaseline": ratios, "problems": problems}


def summary(out, warm, modes):
    """(the lines, the summary, whether a mode found a problem)."""
    lines, result = [], {}
    for mode in modes:
        shown, result[mode] = judge(mode, points_of(out, mode), warm)
        lines += shown
    return lines, result, any(row["problems"] for row in result.values())


def _summary(out, warm, *modes):
    lines, result, bad = summary(out, int(warm), modes)
    cli.emit(lines)
    dump(result, os.path.join(out, "summary.json"))
    return 1 if bad else 0


COMMANDS = {
    "leaving": lambda out, mode, sale_secs: print(leaving(out, mode, int(sale_secs))),
    "summary": _summary,
}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
