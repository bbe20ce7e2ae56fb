"""bench-crowd's line of a sale and its medians."""
import json
import unittest

from hmdptools import crowd
from hmdptools.tests.support import RunDir, crowd as crowd_json, fixture, printed, text


class Line(unittest.TestCase):
    def crowd(self):
        return crowd_json(2053.119, 5320.703, 12.078039, connections=10000, maxMs=7000.4,
                          outsideEnvelope={"502": 2, "504": 1}, retriesFollowed=15)

    def test_against_the_baseline(self):
        baseline = crowd_json(229.631, 448.767, 5.319776)
        self.assertEqual(crowd.line(self.crowd(), baseline),
                         "C=10000 p50=2053ms p99=5321ms max=7000ms sold-out=12.08s dropped=0 reopened=0 "
                         "outside-envelope=3 unsold=0 retry-after-followed=15 answers={'OK': 20000, 'SOLD_OUT': 10000} "
                         "audit=PASS sell-out-vs-C=1000: 2.27x")

    def test_alone_and_against_a_baseline_that_never_sold_out(self):
        alone = ("C=10000 p50=2053ms p99=5321ms max=7000ms sold-out=12.08s dropped=0 reopened=0 outside-envelope=3 "
                 "unsold=0 retry-after-followed=15 answers={'OK': 20000, 'SOLD_OUT': 10000} audit=PASS")
        self.assertEqual(crowd.line(self.crowd()), alone)
        self.assertEqual(crowd.line(self.crowd(), crowd_json(229.6, 448.8, None)), alone)

    def test_a_sale_that_dropped_connections_and_never_sold_out(self):
        d = crowd_json(3100.2, 9800.0, None, connections=20000, droppedInFlight=4908, reopened=1112, unsold=120,
                       passed=False, answers={"OK": 19880, "SOLD_OUT": 4000, "UNAVAILABLE": 6000})
        del d["reopened"]  # a load tool of before the count of held connections closed
        self.assertEqual(crowd.line(d, crowd_json(229.6, 448.8, 5.3)),
                         "C=20000 p50=3100ms p99=9800ms max=13720ms sold-out=0.00s dropped=4908 reopened=0 "
                         "outside-envelope=0 unsold=120 retry-after-followed=0 "
                         "answers={'OK': 19880, 'SOLD_OUT': 4000, 'UNAVAILABLE': 6000} audit=FAIL")


class Medians(RunDir):
    def test_the_kept_bench_crowd_comes_out_again(self):
        # 2026-11-29 22:25, HOSTS=1, three runs of each setting: the kept
        # spreads are the runs.
        kept = fixture("2026-11-29-2225-bench-crowd-5378d0a.json")
        for setting, res in kept["results"].items():
            figures = zip(*([s["min"], s["median"], s["max"]] for s in (res["p50Ms"], res["p99Ms"], res["soldOutSecs"])))
            for run, (p50, p99, sold_out) in enumerate(figures, 1):
                self.write(f"{setting}-{run}.json", crowd_json(p50, p99, sold_out))
        self.write("summary.json", {"an earlier": "summary"})
        self.write("async-single-c1000-1.log", "not a sale's JSON")
        shown, _ = printed(crowd.COMMANDS["medians"], self.out)
        self.assertEqual(shown, text(kept["lines"]))
        self.assertEqual(json.loads(self.read("summary.json")), kept["results"])

    def test_what_a_setting_lost_is_added_up(self):
        self.write("sync-single-c20000-1.json", crowd_json(2957.0, 4387.0, 5.35, droppedInFlight=3, reopened=2,
                                                           outsideEnvelope={"502": 1}, unsold=7, passed=False))
        self.write("sync-single-c20000-2.json", crowd_json(2288.0, 3713.0, None, droppedInFlight=1,
                                                           outsideEnvelope={"502": 1, "504": 2}))
        lines, summary = crowd.medians(self.out)
        self.assertEqual(lines[1], "sync-single-c20000: p50 2622 ms (2288-2957), p99 4050 ms (3713-4387), "
                                   "sold out 5.35 s (5.35-5.35), dropped 6, outside the envelope 4, unsold 7, "
                                   "audits 1 of 2 passed")
        self.assertEqual(summary["sync-single-c20000"]["soldOutSecs"]["n"], 1, "a sale that never sold out gives no figure")


if __name__ == "__main__":
    unittest.main()
