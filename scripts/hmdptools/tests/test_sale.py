"""bench-sync's, bench-async's and bench-load's lines and medians."""
import json
import unittest

from hmdptools import sale
from hmdptools.tests.support import RunDir, audit, fixture, printed, row, text, without_n
from hmdptools.tests.support import sale as sale_json


def three(spread):
    """A kept spread of three runs: the runs themselves."""
    return [spread["min"], spread["median"], spread["max"]]


class SyncLine(unittest.TestCase):
    def test_a_group_commit_sale(self):
        d = sale_json(3.814476954, [row("success", 20000, 95.3, 279.295, 3.814476954),
                                    row("SOLD_OUT", 10000, 60.1, 150.0, 3.814476954)], audit())
        self.assertEqual(sale.sync_line(d),
                         "wall=3.81s orders/s=5243 p50=95ms p99=279ms success=20000 oversold=0 duplicates=0 "
                         "balanced=True audit=PASS")

    def test_a_failed_audit(self):
        d = sale_json(18.143545368, [row("success", 20003, 450.2, 1209.343, 18.1)],
                      audit(sold=20003, oversold=3, stockPlusOrdersIsInitial=False, passed=False))
        self.assertEqual(sale.sync_line(d),
                         "wall=18.14s orders/s=1102 p50=450ms p99=1209ms success=20003 oversold=3 duplicates=0 "
                         "balanced=False audit=FAIL")


class SyncMedians(RunDir):
    def test_the_kept_bench_sync_comes_out_again(self):
        # 2026-11-28 00:45, RUNS=3 BATCHES="1 64": three runs each, so the
        # kept spread is the runs.
        kept = fixture("2026-11-28-0045-bench-sync-e94afb5.json")["results"]
        for batch, res in kept.items():
            for i, (wall, p99) in enumerate(zip(three(res["wallSecs"]), three(res["p99Ms"])), 1):
                self.write(f"sync-{batch}-{i}.json", sale_json(wall, [
                    row("success", 20000, 95.0, p99, wall), row("SOLD_OUT", 10000, 50.0, p99 / 2, wall)], audit()))
        shown, status = printed(sale.COMMANDS["sync-medians"], self.out, "3", "1", "64")
        self.assertEqual(shown, text([
            "",
            "medians of the runs (min-max)",
            "ORDER_BATCH_MAX=1: wall 18.14 s (17.44-18.93), orders/s 1,102 (1,057-1,147), p99 1209 ms (1064-1218), "
            "audits 3 of 3 passed",
            "ORDER_BATCH_MAX=64: wall 3.81 s (3.70-3.85), orders/s 5,243 (5,200-5,402), p99 279 ms (250-360), "
            "audits 3 of 3 passed"]))
        summary = json.loads(self.read("sync-summary.json"))
        self.assertEqual(without_n(summary), kept)
        self.assertEqual(self.read("sync-summary.json"), json.dumps(summary, indent=2), "json.dump's text, indent 2")

    def test_a_run_that_wrote_nothing_is_not_left_out(self):
        self.write("sync-64-1.json", sale_json(3.8, [row("success", 20000, 95.0, 279.0, 3.8)], audit()))
        with self.assertRaises(FileNotFoundError):
            sale.sync_medians(self.out, 2, ["64"])


class AsyncLine(unittest.TestCase):
    def test_the_ceiling_has_no_audit(self):
        d = sale_json(3.04372241, [row("success", 30000, 80.2, 250.1, 3.04372241)])
        self.assertEqual(sale.async_line(d), "wall=3.04s req/s=9856 p50=80ms p99=250ms")

    def test_a_sale_with_its_rows_landed_and_redis_reconciled(self):
        d = sale_json(4.251564762, [row("success", 20000, 90.0, 302.591, 4.25), row("SOLD_OUT", 10000, 70.0, 200.0, 4.25)],
                      audit(redis={"redisStock": 0, "redisOrders": 20000, "agrees": True}), rowsLandedSecs=4.32627297)
        self.assertEqual(sale.async_line(d),
                         "wall=4.25s req/s=7056 p50=90ms p99=303ms rows-landed=4.33s success=20000 oversold=0 "
                         "duplicates=0 redis-stock=0 db-stock=0 audit=PASS")

    def test_rows_that_never_landed(self):
        d = sale_json(6.9, [row("success", 19990, 90.0, 347.647, 6.9)], audit(sold=19990, passed=False))
        self.assertEqual(sale.async_line(d),
                         "wall=6.90s req/s=2897 p50=90ms p99=348ms rows-landed=NOT success=19990 oversold=0 "
                         "duplicates=0 redis-stock=None db-stock=10 audit=FAIL")


class AsyncMedians(RunDir):
    def test_the_kept_bench_async_comes_out_again(self):
        kept = fixture("2026-11-28-0046-bench-async-e94afb5.json")["results"]
        c, a = kept["ceiling"], kept["async"]
        for i, (wall, rate) in enumerate(zip(three(c["wallSecs"]), three(c["requestsPerSec"])), 1):
            d = sale_json(wall, [row("success", 30000, 80.0, 250.0, wall)])
            d["report"]["rows"][-1]["throughputPerSec"] = rate
            self.write(f"ceiling-{i}.json", d)
        runs = zip(three(a["wallSecs"]), three(a["rowsLandedSecs"]), three(a["p99Ms"]))
        for i, (wall, landed, p99) in enumerate(runs, 1):
            self.write(f"async-{i}.json", sale_json(wall, [row("success", 20000, 90.0, p99, wall)], audit(),
                                                    rowsLandedSecs=landed))
        shown, _ = printed(sale.COMMANDS["async-medians"], self.out, "3")
        self.assertEqual(shown, text([
            "",
            "medians of the runs (min-max): ceiling wall 3.04 s (2.63-3.60), req/s 9,856 (8,331-11,410); "
            "async wall 4.25 s (3.79-4.27), rows landed 4.33 s (4.07-6.92), p99 303 ms (269-348), audits 3 of 3 passed"]))
        self.assertEqual(without_n(json.loads(self.read("async-summary.json"))), kept)

    def test_a_sale_whose_rows_never_landed_gives_no_figure(self):
        self.write("ceiling-1.json", sale_json(3.0, [row("success", 30000, 80.0, 250.0, 3.0)]))
        self.write("async-1.json", sale_json(4.0, [row("success", 20000, 90.0, 300.0, 4.0)], audit(passed=False)))
        lines, summary = sale.async_medians(self.out, 1)
        self.assertIsNone(summary["async"]["rowsLandedSecs"])
        self.assertIn("rows landed -, p99 300 ms (300-300), audits 0 of 1 passed", lines[0])


class LoadLine(unittest.TestCase):
    def test_the_course_scale(self):
        d = sale_json(1.2, [row("success", 200, 310.4, 580.2, 1.2, p95=520.0),
                            row("SOLD_OUT", 800, 250.4, 540.7, 1.2, p95=480.3)], audit(sold=200, stock=200))
        self.assertEqual(sale.load_line(d),
                         "wall=1.20s throughput=833/s orders/s=167 p50=310ms p95=520ms p99=580ms success=200 "
                         "SOLD_OUT=800 oversold=0 duplicates=0 balanced=True audit=PASS")

    def test_a_sale_that_sold_nothing(self):
        d = sale_json(0.5, [row("503", 1000, 20.0, 40.0, 0.5)], audit(sold=0, stock=200, passed=False))
        self.assertEqual(sale.load_line(d),
                         "wall=0.50s throughput=2000/s orders/s=0 p50=20ms p95=36ms p99=40ms 503=1000 oversold=0 "
                         "duplicates=0 balanced=True audit=FAIL")


if __name__ == "__main__":
    unittest.main()
