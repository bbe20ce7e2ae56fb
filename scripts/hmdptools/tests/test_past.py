"""bench-past's line of a sale and its summary, from kept runs."""
import ast
import json
import re
import unittest

from hmdptools import past
from hmdptools.tests.support import RunDir, crowd, fixture, printed, text

PRINTED = fixture("2026-11-27-bench-past.txt")
LINE = re.compile(r"(?P<name>\w+-\w+-\d+): wall=(?P<wall>[\d.]+)s p50=(?P<p50>\d+)ms p99=(?P<p99>\d+)ms "
                  r"answers=(?P<answers>\{.*\}) unsold=(?P<unsold>\d+) audit=(?P<audit>PASS|FAIL)")
# The p99s the medians' lines show to the hundredth (min, median and max of three runs).
P99 = re.compile(r"(\w+) +p99Ms +empty [\d.]+ms \(.*\)  past .*")


class FromThePrintedRun(RunDir):
    """2026-11-27 21:22, scripts/bench-past: every sale's line, then the
    medians, as it printed them."""

    def setUp(self):
        super().setUp()
        shown = {}  # (mode, db) -> the p99s to the hundredth
        for line in PRINTED:
            if P99.fullmatch(line):
                mode = line.split()[0]
                for db, figures in zip(("empty", "past"), re.findall(r"([\d.]+)ms \(([\d.]+)-([\d.]+), 3 runs\)", line)):
                    shown[mode, db] = [float(f) for f in figures]
        self.sales = []
        for line in PRINTED:
            m = LINE.fullmatch(line)
            if m:
                mode, db, _ = m["name"].split("-")
                p99 = next(f for f in shown[mode, db] if f"{f:.0f}" == m["p99"])
                d = crowd(float(m["p50"]), p99, None, wall=float(m["wall"]), answers=ast.literal_eval(m["answers"]),
                          unsold=int(m["unsold"]), passed=m["audit"] == "PASS")
                self.sales.append((m["name"], d, line))

    def test_every_sale_line(self):
        self.assertEqual(len(self.sales), 12)
        for name, d, line in self.sales:
            self.assertEqual(past.line(d, name), line)

    def test_the_medians(self):
        for name, d, _ in self.sales:
            self.write(f"{name}.json", d)
        # Five starts each: 18 (17-29) ms on both.
        self.write("empty.start", "17\n18\n18\n18\n29\n")
        self.write("past.start", "29\n18\n17\n18\n18\n")
        self.write("sweep.secs", "0\n")
        shown, _ = printed(past.COMMANDS["summary"], self.out, "sync", "async")
        self.assertEqual(shown, text(PRINTED[PRINTED.index(""):]))
        summary = json.loads(self.read("summary.json"))
        self.assertEqual(summary["sweepSecs"], 0.0)
        self.assertEqual(summary["sync"]["past"]["auditsPassed"], 3)


class FromTheKeptSummary(RunDir):
    def test_the_kept_bench_past_comes_out_again(self):
        kept = fixture("2026-11-28-1131-bench-past-400385b.json")["results"]
        for db in ("empty", "past"):
            s = kept["startMs"][db]
            self.write(f"{db}.start", "".join(f"{ms:.0f}\n" for ms in (s["min"], s["median"], s["median"], s["median"], s["max"])))
        for mode in ("sync", "async"):
            for db in ("empty", "past"):
                walls, p99s = ([s["min"], s["median"], s["max"]] for s in (kept[mode][db]["wallSecs"], kept[mode][db]["p99Ms"]))
                for run, (wall, p99) in enumerate(zip(walls, reversed(p99s)), 1):
                    self.write(f"{mode}-{db}-{run}.json", crowd(100.0, p99, None, wall=wall))
        self.write("sweep.secs", "27\n")
        lines, summary = past.summary(self.out, ["sync", "async"])
        self.assertEqual(json.loads(json.dumps(summary)), kept)
        self.assertEqual(lines[0], "\nstart-up to /ready, ms: empty 21.00 (15.00-32.00, 5 runs), "
                                   "past 19.00 (16.00-37.00, 5 runs); past / empty 0.90x")

    def test_no_sweep_file_no_sweep(self):
        self.write("empty.start", "20\n")
        self.write("past.start", "30\n")
        self.write("async-empty-1.json", crowd(100.0, 172.5, None, wall=2.75))
        self.write("async-past-1.json", crowd(100.0, 181.8, None, wall=None))
        lines, summary = past.summary(self.out, ["async"])
        self.assertNotIn("sweepSecs", summary)
        self.assertEqual(lines[1:], ["async wallSecs empty 2.75s (2.75-2.75, 1 runs)  past -  past / empty 0.00x",
                                     "async p99Ms    empty 172.50ms (172.50-172.50, 1 runs)  past 181.80ms (181.80-181.80, 1 runs)  past / empty 1.05x",
                                     "async audits passed: empty 1/1, past 1/1"])


if __name__ == "__main__":
    unittest.main()
