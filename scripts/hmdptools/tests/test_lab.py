"""bench-lab's medians of the strategy lab's runs."""
import unittest

from hmdptools import lab
from hmdptools.tests.support import RunDir, printed, text


def strategy(name, wall_ms, rate, successes, left, refusals, p50, p99, oversold=0, duplicates=0):
    """One strategy's run (tools/lab's StrategyRun)."""
    return {"strategy": name.split()[0], "name": name, "voucherId": 9, "buyers": 33000, "wallMs": wall_ms,
            "ordersPerSec": rate, "successes": successes, "refusals": refusals, "p50Ms": p50, "p99Ms": p99,
            "audit": {"initialStock": 20000, "stockLeft": left, "orders": 20000 - left, "oversold": oversold,
                      "duplicates": duplicates, "lost": 0, "unannounced": 0}, "notes": []}


def lock(name, acquisitions, overlaps, deadlocked, wall_ms):
    """One lock scenario's run (tools/lab's LockRun)."""
    return {"scenario": name.replace(" ", ""), "name": name, "tasks": 8, "acquisitions": acquisitions,
            "overlaps": overlaps, "foreignDeletes": 0, "lostLeases": 0, "deadlocked": deadlocked, "wallMs": wall_ms}


def report(i):
    naive = [(6010, 3334.2, 20029, -29, {"SOLD_OUT": 12970}, 278.4, 289.1, 29, 1825),
             (5880, 3400.0, 20027, -27, {"SOLD_OUT": 12972}, 270.0, 285.0, 27, 1823),
             (6120, 3270.5, 20031, -31, {"SOLD_OUT": 12968, "ERROR": 1}, 281.0, 300.2, 31, 1824)][i]
    group = [(380, 52354.1, 16.2, 24.0), (370, 54000.0, 15.9, 23.1), (390, 51000.0, 16.4, 25.3)][i]
    return {"scale": {"buyers": 33000, "stock": 20000},
            "strategies": [strategy("naive read-check-write", *naive),
                           strategy("group commit (sync, up to 64)", group[0], group[1], 20000, 0,
                                    {"SOLD_OUT": 10900, "TOO_MANY_REQUESTS": 2100}, group[2], group[3]),
                           strategy("Redis Lua + stream (async)", 810 - 10 * i, 24647.0 + i, 20000, 0, {}, 9.0, 13.0)],
            "locks": [lock("no lease", 800 + i, 0, 8, 4000), lock("lease shorter than work", 800, 12 + i, 0, 4001)]}


class Medians(RunDir):
    def test_three_runs(self):
        for i in range(3):
            self.write(f"lab-{i + 1}.json", report(i))
        shown, _ = printed(lab.COMMANDS["medians"], self.out, "3")
        self.assertEqual(shown, text([
            "| strategy | wall s (median) | min-max | orders/s | successes | stock left | refused (median by reason) "
            "| p50 ms | p99 ms | oversold | duplicates |",
            "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|",
            "| naive read-check-write | 6.01 | 5.88-6.12 | 3334 | 20029 | -29 | ERROR 0, SOLD_OUT 12970 | 278.4 | 289.1 "
            "| 29/27/31 | 1825/1823/1824 |",
            "| group commit (sync, up to 64) | 0.38 | 0.37-0.39 | 52354 | 20000 | 0 | SOLD_OUT 10900, TOO_MANY_REQUESTS 2100 "
            "| 16.2 | 24.0 | 0/0/0 | 0/0/0 |",
            "| Redis Lua + stream (async) | 0.80 | 0.79-0.81 | 24648 | 20000 | 0 | - | 9.0 | 13.0 | 0/0/0 | 0/0/0 |",
            "",
            "| lock scenario | per run |",
            "|---|---|",
            "| no lease | tasks 8, acquisitions 800, overlaps 0, foreignDeletes 0, lostLeases 0, deadlocked 8, wallMs 4000 "
            "/ tasks 8, acquisitions 801, overlaps 0, foreignDeletes 0, lostLeases 0, deadlocked 8, wallMs 4000 "
            "/ tasks 8, acquisitions 802, overlaps 0, foreignDeletes 0, lostLeases 0, deadlocked 8, wallMs 4000 |",
            "| lease shorter than work | tasks 8, acquisitions 800, overlaps 12, foreignDeletes 0, lostLeases 0, deadlocked 0, "
            "wallMs 4001 / tasks 8, acquisitions 800, overlaps 13, foreignDeletes 0, lostLeases 0, deadlocked 0, wallMs 4001 "
            "/ tasks 8, acquisitions 800, overlaps 14, foreignDeletes 0, lostLeases 0, deadlocked 0, wallMs 4001 |"]))

    def test_a_missing_run_is_not_left_out(self):
        self.write("lab-1.json", report(0))
        with self.assertRaises(FileNotFoundError):
            printed(lab.COMMANDS["medians"], self.out, "2")


if __name__ == "__main__":
    unittest.main()
