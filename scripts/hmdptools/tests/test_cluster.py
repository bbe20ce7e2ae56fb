"""bench-cluster's and bench-segments' rows and tables."""
import unittest

from hmdptools import cluster
from hmdptools.tests.support import RunDir, audit, printed, row, sale, text


class ClusterRows(unittest.TestCase):
    def test_a_sale_with_its_202s(self):
        d = sale(5.4213, [row("success", 16581, 120.4, 490.1, 5.42), row("202 unreplicated", 3419, 118.0, 480.0, 5.42),
                          row("SOLD_OUT", 10000, 90.0, 300.0, 5.42)],
                 audit(successAnswers=16581, unreplicatedAnswers=3419))
        self.assertEqual(cluster.cluster_row("async-cluster-nowait", "2", d),
                         "async-cluster-nowait\t2\t5.42\t120\t490\t16581\t3419\tPASS")

    def test_a_failed_audit(self):
        d = sale(4.1, [row("success", 20000, 140.2, 420.6, 4.1)], audit(passed=False))
        del d["audit"]["unreplicatedAnswers"]
        self.assertEqual(cluster.cluster_row("sync-single", "1", d), "sync-single\t1\t4.10\t140\t421\t20000\t0\tFAIL")


class ClusterTable(RunDir):
    def test_the_medians_per_setup_in_the_order_run(self):
        path = self.write("cluster-bench.tsv", "".join(
            "\t".join(r) + "\n" for r in [
                ["sync-single", "1", "4.10", "140", "420", "20000", "0", "PASS"],
                ["sync-single", "2", "3.95", "135", "410", "20000", "0", "PASS"],
                ["sync-single", "3", "4.30", "150", "455", "20000", "0", "PASS"],
                ["async-cluster", "1", "5.42", "120", "490", "19990", "10", "PASS"],
                ["async-cluster", "2", "6.41", "131", "489", "20000", "0", "PASS"],
                ["async-cluster", "3", "5.80", "125", "500", "20000", "0", "FAIL"],
                ["async-cluster-nowait", "1", "5.29", "110", "461", "20000", "0", "PASS"]]) + "\n")
        shown, _ = printed(cluster.COMMANDS["cluster-table"], path)
        self.assertEqual(shown, text([
            "",
            "| setup | runs | wall (median) | p50 (median) | p99 (median) | 200s | 202s | audits |",
            "|---|---|---|---|---|---|---|---|",
            "| sync-single | 3 | 4.10 s | 140 ms | 420 ms | 20000 | 0 | PASS |",
            "| async-cluster | 3 | 5.80 s | 125 ms | 490 ms | 20000 | 0 | FAIL |",
            "| async-cluster-nowait | 1 | 5.29 s | 110 ms | 461 ms | 20000 | 0 | PASS |"]))


class SegmentsRows(unittest.TestCase):
    def test_every_masters_cpu_and_the_busiest(self):
        d = sale(7.5102, [row("success", 20000, 200.0, 623.4, 7.51), row("SOLD_OUT", 10000, 150.0, 500.0, 7.51)], audit(),
                 soldOutBeforeLastSale=0,
                 cpu={"master-7003": {"cpuSecs": 0.314, "perRequestUs": 10.5, "missing": 0},
                      "master-7001": {"cpuSecs": 1.994, "perRequestUs": 66.5, "missing": 0},
                      "master-7002": {"cpuSecs": 0.33, "perRequestUs": 11.0, "missing": 0}})
        self.assertEqual(cluster.segments_row("1", "1", d, "2"),
                         "1\t1\t7.51\t623\t20000\t1.99\t7001:1.99 7002:0.33 7003:0.31\t2\t30000\tPASS\t0\t-\t-")

    def test_a_sale_the_service_split_says_when_and_how_much_sold_before(self):
        d = sale(7.0, [row("success", 20000, 200.0, 600.0, 7.0)], audit(), soldOutBeforeLastSale=0,
                 startedAtMs=1_000_000, cpu={"master-7001": {"cpuSecs": 0.9, "perRequestUs": 30.0, "missing": 0}})
        self.assertEqual(cluster.segments_row("auto", "2", d, "5", "20000", "1001250", "19000"),
                         "auto\t2\t7.00\t600\t20000\t0.90\t7001:0.90\t5\t20000\tPASS\t0\t1.25\t0.0500")


class SegmentsTable(RunDir):
    def write_rows(self, rows):
        return self.write("segments-bench.tsv", "".join("\t".join(r) + "\n" for r in rows))

    def test_one_segment_against_three(self):
        others = "7002:0.33 7003:0.31"
        path = self.write_rows([
            ["1", "1", "7.51", "623", "20000", "1.99", "7001:1.99 " + others, "0", "30000", "PASS", "0", "-", "-"],
            ["auto", "1", "7.30", "700", "20000", "0.90", "7001:0.90 7002:0.85 7003:0.80", "4", "30000", "PASS", "0",
             "1.20", "0.0500"],
            ["auto", "2", "7.35", "710", "20000", "0.80", "7001:0.80 7002:0.85 7003:0.80", "4", "30000", "PASS", "0",
             "1.40", "0.0700"],
            ["3", "1", "7.56", "794", "20000", "0.97", "7001:0.97 7002:0.95 7003:0.96", "1", "30000", "PASS", "0"],
            ["1", "2", "7.20", "600", "20000", "1.55", "7001:1.55 " + others, "0", "30000", "PASS", "0"],
            ["3", "2", "7.40", "780", "20000", "1.01", "7001:1.01 7002:0.99 7003:0.98", "0", "30000", "PASS", "3"],
            ["1", "3", "7.60", "640", "20000", "2.01", "7001:2.01 " + others, "0", "30000", "PASS", "0"],
            ["3", "3", "7.70", "800", "20000", "1.00", "7001:1.00 7002:0.97 7003:0.99", "0", "30000", "PASS", "0"]])
        shown, _ = printed(cluster.COMMANDS["segments-table"], path)
        self.assertEqual(shown, text([
            "",
            "| segments | runs | wall (median) | p99 (median) | 200s | busiest master CPU (median) | borrows / requests "
            "| SOLD_OUT before the last sale / requests | split after (median) | sold before the split (median) "
            "| audits |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
            "| 1 | 3 | 7.51 s | 623 ms | 20000 | 1.99 s | 0.0000% | 0.000% | - | - | PASS |",
            "| auto | 2 | 7.32 s | 705 ms | 20000 | 0.85 s | 0.0133% | 0.000% | 1.30 s (2 of 2) | 6.0% | PASS |",
            "| 3 | 3 | 7.56 s | 794 ms | 20000 | 1.00 s | 0.0011% | 0.003% | - | - | PASS |",
            "",
            "busiest master, 3 segments against 1: 50%",
            "",
            "busiest master, split by the service against 1: 43%"]))

    def test_eight_segments_alone_no_comparison(self):
        path = self.write_rows([["8", "1", "6.28", "518", "20000", "1.07", "7001:1.07 7002:0.71 7003:0.70", "11", "30000",
                                 "FAIL", "0"]])
        self.assertEqual(cluster.segments_table(cluster.rows_of(path))[2:],
                         ["| 8 | 1 | 6.28 s | 518 ms | 20000 | 1.07 s | 0.0367% | 0.000% | - | - | FAIL |"])


if __name__ == "__main__":
    unittest.main()
