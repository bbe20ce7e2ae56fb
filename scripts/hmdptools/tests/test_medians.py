import unittest

from hmdptools.medians import ratio, show, spread
from hmdptools.tests.support import fixture


class Spread(unittest.TestCase):
    def test_the_median_the_spread_and_the_count(self):
        s = spread([3.0, 1.0, 2.0, 10.0])
        self.assertEqual(s, {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4})
        self.assertIsNone(spread([]), "a figure no run gave is not a zero")
        self.assertEqual(spread(iter([5])), {"median": 5, "min": 5, "max": 5, "n": 1})

    def test_a_kept_bench_many_spread_comes_out_again(self):
        # 2026-11-28 11:16, bench-many, sync over 50 vouchers: the five
        # runs' walls as their lines show them, the kept spread's three exact.
        kept = fixture("2026-11-28-1116-bench-many-400385b.json")["results"]["sync"]["50"]["wallSecs"]
        walls = [2.92, kept["min"], kept["median"], 3.308, kept["max"]]
        self.assertEqual(spread(walls), kept)


class Show(unittest.TestCase):
    def test_as_the_benches_print_it(self):
        s = spread([3.0, 1.0, 2.0, 10.0])
        self.assertEqual(show(s, " s"), "2.50 s (1.00-10.00)")
        self.assertEqual(show(s, "", ".0f", runs=True), "2 (1-10, 4 runs)")
        self.assertEqual(show(spread([1102.3, 1056.7, 1146.9]), "", ",.0f"), "1,102 (1,057-1,147)")
        self.assertEqual(show(None, " s"), "-")


class Ratio(unittest.TestCase):
    def test_of_two_medians(self):
        self.assertEqual(ratio(spread([4.0]), spread([2.0])), 2.0)
        self.assertIsNone(ratio(None, spread([1.0])))
        self.assertIsNone(ratio(spread([1.0]), None))
        self.assertIsNone(ratio(spread([1.0]), spread([0.0])), "no ratio over a zero median")


if __name__ == "__main__":
    unittest.main()
