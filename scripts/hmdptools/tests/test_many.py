"""bench-many's line of a sale and its medians, from a kept run's lines."""
import ast
import json
import re
import unittest

from hmdptools import many
from hmdptools.tests.support import RunDir, crowd, fixture, printed, text

KEPT = fixture("2026-11-28-1116-bench-many-400385b.json")
LINE = re.compile(r"(?P<name>(?P<mode>\w+)-v(?P<n>\d+)-\d+): vouchers=\d+ wall=(?P<wall>[\d.]+|None)s "
                  r"last-answer=(?P<last>[\d.]+)s p50=(?P<p50>\d+)ms p99=(?P<p99>\d+)ms answers=(?P<answers>\{.*\}) "
                  r"unsold=(?P<unsold>\d+) audit=(?P<audit>PASS|FAIL)")


def exact(shown, spread, as_shown):
    """The kept spread's exact figure that a line shows as SHOWN, or the
    line's own."""
    if shown == "None":
        return None
    return next((f for f in (spread["min"], spread["median"], spread["max"]) if as_shown(f) == shown), float(shown))


def rebuilt():
    """Every sale of the kept run: its name and its JSON, the figures its
    line shows, the kept spread's exact ones where it names them."""
    for line in KEPT["lines"]:
        m = LINE.fullmatch(line)
        if not m:
            continue
        res = KEPT["results"][m["mode"]][m["n"]]
        wall = exact(m["wall"], res["wallSecs"], lambda f: repr(round(f, 3)))
        d = crowd(float(m["p50"]), exact(m["p99"], res["p99Ms"], lambda f: f"{f:.0f}"), None, wall=wall, vouchers=int(m["n"]),
                  lastAnswerSecs=float(m["last"]), answers=ast.literal_eval(m["answers"]), unsold=int(m["unsold"]),
                  passed=m["audit"] == "PASS")
        yield m["name"], d, line


class Line(unittest.TestCase):
    def test_every_kept_line_comes_out_again(self):
        sales = list(rebuilt())
        self.assertEqual(len(sales), 30)
        for name, d, line in sales:
            self.assertEqual(many.line(d, name), line)

    def test_rows_that_never_landed(self):
        d = crowd(102.4, 221.6, 2.9, wall=None, vouchers=500, lastAnswerSecs=2.9721, unsold=3, passed=False)
        self.assertEqual(many.line(d, "sync-v500-2"),
                         "sync-v500-2: vouchers=500 wall=Nones last-answer=2.972s p50=102ms p99=222ms "
                         "answers={'OK': 20000, 'SOLD_OUT': 10000} unsold=3 audit=FAIL")


class Medians(RunDir):
    def test_the_kept_bench_many_comes_out_again(self):
        for name, d, _ in rebuilt():
            self.write(f"{name}.json", d)
        shown, _ = printed(many.COMMANDS["medians"], self.out, "sync", "async")
        self.assertEqual(shown, text(KEPT["lines"][KEPT["lines"].index(""):]))
        self.assertEqual(json.loads(self.read("summary.json")), KEPT["results"])

    def test_no_one_voucher_sale_no_ratio(self):
        self.write("async-v50-1.json", crowd(100.0, 150.0, 3.0, wall=3.4, vouchers=50))
        self.write("async-v50-2.json", crowd(100.0, 170.0, 3.0, wall=None, vouchers=50))
        lines, summary = many.medians(self.out, ["async"])
        self.assertEqual(lines[2], "async        50    2    3.40 (3.40-3.40)  0.00x    160 (150-170)  0.00x  2/2 passed")
        self.assertNotIn("wallRatio", summary["async"][50])


if __name__ == "__main__":
    unittest.main()
