"""bench-cpu's tables, from figures of its kept run (2026-11-28 00:44)."""
import json
import os
import unittest

from hmdptools import cpu
from hmdptools.tests.support import RunDir, printed, row, sale, text

# Runs 3 and 4 of the kept bench-cpu: per setup and request, req/s and
# each group's µs per request (instances, nginx, redis, mariadb).
KEPT_RUNS = {
    1: {"async": {"noop": (9986, [74, 49, 25, 6]), "sale": (9310, [93, 46, 57, 10])},
        "sync": {"noop": (12031, [52, 50, 12, 0]), "sale": (8994, [77, 49, 28, 18])}},
    2: {"async": {"noop": (10005, [69, 49, 23, 11]), "sale": (9319, [94, 50, 59, 12])},
        "sync": {"noop": (11774, [52, 49, 14, 0]), "sale": (8561, [81, 52, 29, 19])}},
}


def measured(rate, us, **more):
    """A run's JSON with its CPU per group (`--cpu`) and its rate."""
    d = sale(3.0, [row("success", 20000, 90.0, 300.0, 3.0)])
    d["report"]["rows"][-1]["throughputPerSec"] = rate
    d["cpu"] = {g: {"cpuSecs": u * 30000 / 1e6, "perRequestUs": u, "missing": 0} for g, u in us.items()}
    d.update(more)
    return d


class Tables(RunDir):
    def write_run(self, setup, kind, run, d):
        self.write(f"{setup}-{kind}-r{run}.json", d)

    def test_two_runs_and_their_medians(self):
        for run, setups in KEPT_RUNS.items():
            for setup, kinds in setups.items():
                for kind, (rate, us) in kinds.items():
                    self.write_run(setup, kind, run, measured(rate, dict(zip(cpu.GROUPS, us))))
        os.environ.update(RUNS="2", GUARD="")
        try:
            shown, _ = printed(cpu.COMMANDS["table"], self.out, "async", "sync")
        finally:
            del os.environ["RUNS"], os.environ["GUARD"]
        head = ["| setup | request | req/s | instances | nginx | redis | mariadb | total | ÷ no-op | rate ÷ no-op's |",
                "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        self.assertEqual(shown, text([
            "",
            f"Run 1 of 2. Server CPU per request, µs (seckill-load, the same keep-alive client for both; {self.out}):",
            "", *head,
            "| async | no-op GET /user/me | 9,986 | 74 | 49 | 25 | 6 | 154 | 1.00x | 100% |",
            "| async | async order | 9,310 | 93 | 46 | 57 | 10 | 206 | 1.34x | 93% |",
            "| sync | no-op GET /user/me | 12,031 | 52 | 50 | 12 | 0 | 114 | 1.00x | 100% |",
            "| sync | sync order | 8,994 | 77 | 49 | 28 | 18 | 172 | 1.51x | 75% |",
            "",
            f"Run 2 of 2. Server CPU per request, µs (seckill-load, the same keep-alive client for both; {self.out}):",
            "", *head,
            "| async | no-op GET /user/me | 10,005 | 69 | 49 | 23 | 11 | 152 | 1.00x | 100% |",
            "| async | async order | 9,319 | 94 | 50 | 59 | 12 | 215 | 1.41x | 93% |",
            "| sync | no-op GET /user/me | 11,774 | 52 | 49 | 14 | 0 | 115 | 1.00x | 100% |",
            "| sync | sync order | 8,561 | 81 | 52 | 29 | 19 | 181 | 1.57x | 73% |",
            "",
            "Medians of 2 runs (min-max), all servers' CPU per request, µs; the order over the no-op run by run:",
            "",
            "| setup | no-op | order | order ÷ no-op |",
            "|---|---:|---:|---:|",
            "| async | 153 (152-154) | 210 (206-215) | 1.38x (1.34-1.41) |",
            "| sync | 114 (114-115) | 176 (172-181) | 1.54x (1.51-1.57) |"]))
        summary = json.loads(self.read("summary.json"))
        self.assertEqual(summary["runs"], 2)
        self.assertEqual(summary["setups"]["async"]["noopUs"], {"median": 153.0, "min": 152, "max": 154, "n": 2})
        self.assertEqual(summary["setups"]["sync"]["orderOverNoop"]["max"], 181 / 115)

    def test_one_run_guarded_with_its_order_events(self):
        (noop_rate, noop), (sale_rate, order) = KEPT_RUNS[1]["async"]["noop"], KEPT_RUNS[1]["async"]["sale"]
        self.write_run("async-events", "noop", 1, measured(noop_rate, dict(zip(cpu.GROUPS, noop))))
        self.write_run("async-events", "sale", 1, measured(
            sale_rate, dict(zip(cpu.GROUPS, order), nats=30),
            events={"events": 20000, "unpublished": 0, "p50Ms": 12.4, "p99Ms": 88.6, "maxMs": 140.2}))
        self.write_run("async-events", "guarded", 1, measured(
            1990, {"instances": 150, "nginx": 80, "redis": 90, "mariadb": 12, "nats": 31},
            guarded={"admitPerSecond": 2000}))
        lines, summary = cpu.tables(self.out, ["async-events"], 1, "challenge")
        self.assertEqual(lines[1:], [
            "| setup | request | req/s | instances | nginx | redis | mariadb | nats | total | ÷ no-op | rate ÷ no-op's |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            "| async-events | no-op GET /user/me | 9,986 | 74 | 49 | 25 | 6 | 0 | 154 | 1.00x | 100% |",
            "| async-events | async order | 9,310 | 93 | 46 | 57 | 10 | 30 | 236 | 1.53x | 93% |",
            "| async-events | challenge buyer: path step + order | (admitted 2000/s) | 150 | 80 | 90 | 12 | 31 | 363 | 2.36x | |",
            "| async-events | the path step alone (buyer less order) | | | | | | 127 | 0.82x | |",
            "\nasync-events: 20000 order events published (0 not), lag from commit to ack p50 12 ms, p99 89 ms, max 140 ms"])
        self.assertEqual(summary, {"runs": 1, "setups": {"async-events": {
            "noopUs": {"median": 154, "min": 154, "max": 154, "n": 1},
            "orderUs": {"median": 236, "min": 236, "max": 236, "n": 1},
            "orderOverNoop": {"median": 236 / 154, "min": 236 / 154, "max": 236 / 154, "n": 1}}}})


if __name__ == "__main__":
    unittest.main()
