"""What the tests share: the fixtures (real kept bench outputs), a run's
directory of files, a command's printed output, and the load tool's JSON
of one run in the shape `seckill-load` writes it."""
import contextlib
import io
import json
import os
import tempfile
import unittest

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
SCRIPTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fixture(name):
    """A kept output: the JSON document, or a text file's lines."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as f:
        return json.load(f) if name.endswith(".json") else f.read().splitlines()


def text(lines):
    """What printing each of LINES shows."""
    return "".join(line + "\n" for line in lines)


def printed(command, *args):
    """A command's stdout and its return value."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = command(*args)
    return out.getvalue(), status


def plain(value):
    """VALUE as it reads back from JSON (keys as strings)."""
    return json.loads(json.dumps(value))


def without_n(value):
    """A summary without the spreads' counts: the kept files of
    2026-11-28's first hours were made before the spread counted its runs."""
    if isinstance(value, dict):
        return {k: without_n(v) for k, v in value.items() if k != "n"}
    return value


class RunDir(unittest.TestCase):
    """A test with a scratch directory, as a bench's .stack/NAME."""

    def setUp(self):
        self._dir = tempfile.TemporaryDirectory()
        self.out = self._dir.name

    def tearDown(self):
        self._dir.cleanup()

    def path(self, name):
        return os.path.join(self.out, name)

    def write(self, name, content):
        with open(self.path(name), "w", encoding="utf-8") as f:
            if isinstance(content, str):
                f.write(content)
            else:
                json.dump(content, f, indent=2)
        return self.path(name)

    def read(self, name):
        with open(self.path(name), encoding="utf-8") as f:
            return f.read()


def row(label, samples, median, p99, wall, p95=None):
    """One row of the aggregate report (report.rs's Row)."""
    return {"label": label, "samples": samples, "averageMs": median * 1.1, "medianMs": median,
            "p90Ms": p99 * 0.8, "p95Ms": p95 if p95 is not None else p99 * 0.9, "p99Ms": p99,
            "minMs": 0.4, "maxMs": p99 * 1.5, "errorPct": 0.0, "throughputPerSec": samples / wall}


def sale(wall, rows, audit=None, **more):
    """The load tool's JSON of one sale (`seckill-load --json`): its report
    of ROWS and a TOTAL over them, and its audit when it had one."""
    total = row("TOTAL", sum(r["samples"] for r in rows), max(r["medianMs"] for r in rows),
                max(r["p99Ms"] for r in rows), wall, p95=max(r["p95Ms"] for r in rows))
    doc = {"voucherId": 7, "voucherIds": [7], "voucherMasters": None, "users": 30000, "requests": total["samples"],
           "concurrency": 1000, "rampUpSecs": 0.0, "throughput": None,
           "report": {"wallSecs": wall, "rows": rows + [total]}, "rowsLandedSecs": None, "otherAnswers": {},
           "retried": 0, "afterSale": None, "soldOutBeforeLastSale": 0, "guarded": None, "cpu": {}, "events": None}
    if audit is not None:
        doc["audit"] = audit
    doc.update(more)
    return doc


def audit(sold=20000, stock=20000, passed=True, **more):
    """A voucher's audit (audit/mod.rs's Audit) after SOLD of STOCK sold."""
    doc = {"voucherId": 7, "initialStock": stock, "orders": sold, "remainingStock": stock - sold, "oversold": 0,
           "duplicatePairs": 0, "stockPlusOrdersIsInitial": True, "newOrders": sold, "ordersMatchAnswers": True,
           "successAnswers": sold, "unreplicatedAnswers": 0, "buyers": 30000, "refusalsLeavingStock": 0,
           "unsoldUnexplained": False, "answersOutsideContract": 0, "passed": passed}
    doc.update(more)
    return doc


def crowd(p50, p99, sold_out, wall=None, passed=True, **more):
    """The crowd's JSON of one sale (`seckill-load crowd --json`)."""
    doc = {"voucherId": 7, "voucherIds": [7], "vouchers": 1, "connections": 1000, "processes": 1, "users": 30000,
           "stock": 20000, "guard": "off", "admitPerSecond": None, "retries": 3, "heldAtOpen": 1000,
           "failedToOpen": 0, "droppedInFlight": 0, "reopened": 0, "outsideEnvelope": {},
           "answers": {"OK": 20000, "SOLD_OUT": 10000}, "retriesFollowed": 0, "p50Ms": p50, "p99Ms": p99,
           "maxMs": p99 * 1.4, "soldOutSecs": sold_out, "lastAnswerSecs": (wall or sold_out or 5.0) - 0.05,
           "rowsLandedSecs": wall, "unsold": 0, "report": {"wallSecs": wall or sold_out or 5.0, "rows": []},
           "audit": audit(passed=passed), "voucherAudits": None, "problems": []}
    doc.update(more)
    return doc
