"""scripts/chaos's findings line, events line and summary."""
import json
import os
import shlex
import unittest

from hmdptools import chaos
from hmdptools.tests.support import RunDir, fixture, printed


def write_run(t, row):
    """A kept row's run, rebuilt as the load tool, the checker and the
    fault left it: a sale of three vouchers, the answers each voucher's."""
    base = f"{row['mode']}-{row['fault']}"
    third = [row["success"] // 3 + (i < row["success"] % 3) for i in range(3)]
    accepted = [row["accepted"] // 3 + (i < row["accepted"] % 3) for i in range(3)]
    vouchers = [{"voucherId": 40 + i, "answers": {"successOrders": s, "successWithoutRow": 0, "acceptedOrders": a},
                 "passed": True} for i, (s, a) in enumerate(zip(third, accepted))]
    if "events" in row:
        vouchers[0]["events"] = dict(row["events"], viewsWrong=0)
    rows = [{"label": label, "samples": n} for label, n in row["outcomes"].items()]
    t.write(base + ".json", {
        "report": {"wallSecs": row["saleWallS"] + 0.001, "rows": rows + [{"label": "TOTAL", "samples": sum(row["outcomes"].values())}]},
        "retried": row["retried"],
        "audit": {"vouchers": 3, "initialStock": row["stock"], "orders": row["orders"], "remainingStock": 0,
                  "oversold": row["oversold"], "duplicatePairs": row["duplicatePairs"], "passed": True},
        "voucherAudits": vouchers})
    if "longestStallMs" in row:
        t.write(base + ".check.json", {"findings": {"requests": 45000, "longestStallMs": row["longestStallMs"]}})
    if "faultSaid" in row:
        said = row["faultSaid"].replace("; ", "\n")
        t.write(base + ".log", f"POST /voucher-order/seckill\n2000/45000 answered, 1000/s     fault: {said}\n"
                               "45000/45000 answered, 998/s     \nAggregate report\n")
    with open(t.path("problems.txt"), "a", encoding="utf-8") as f:
        f.writelines(p + "\n" for p in row["problems"])


class Summary(RunDir):
    def kept_again(self, name):
        kept = fixture(name)
        words = dict(w.split("=", 1) for w in shlex.split(kept["command"]) if "=" in w)
        open(self.path("problems.txt"), "w").close()
        for row in kept["results"]["runs"]:
            write_run(self, row)
        self.assertEqual(chaos.summary(self.out, words["MODES"], words["FAULTS"]), kept["results"])

    def test_the_kept_lost_hosts_come_out_again(self):
        # 2026-11-29 19:40: every lost host, one run with a problem.
        self.kept_again("2026-11-29-1940-chaos-3177076.json")

    def test_the_kept_second_sitting_comes_out_again(self):
        self.kept_again("2026-11-29-2000-chaos-442955e.json")

    def test_rows_problems_the_faults_words_and_the_checkers_stall(self):
        load = {"report": {"wallSecs": 30.0012, "rows": [
            {"label": "success", "samples": 20}, {"label": "SERVICE_UNAVAILABLE", "samples": 3},
            {"label": "TOTAL", "samples": 23}]},
            "audit": {"initialStock": 20, "orders": 20, "oversold": 0, "duplicatePairs": 0,
                      "answers": {"successOrders": 20, "successWithoutRow": 0, "acceptedOrders": 0}},
            "voucherAudits": [{"voucherId": 1, "answers": {"successOrders": 5}},
                              {"voucherId": 2, "events": {"orderRows": 20, "events": 20, "wrong": 0, "withoutRow": 0}}]}
        for mode in ("sync", "async"):
            self.write(f"{mode}-lost-x.json", load)
        self.write("sync-lost-x.check.json", {"findings": {"longestStallMs": 32}})
        self.write("sync-lost-x.log", "POST x\n10/20 answered, 9/s     fault: nats3's host lost; nats1 leads it\n"
                                      "a fresh nats3 in its place\n20/20 answered, 10/s     \nAggregate report\n")
        self.write("problems.txt", "async lost-x: 1 answer 200 without a row\n")
        got = chaos.summary(self.out, "sync async", "lost-x lost-y")
        sync, async_ = got["runs"]
        self.assertFalse(got["passed"])
        self.assertTrue(sync["passed"])
        self.assertFalse(async_["passed"])
        self.assertEqual((sync["unavailable"], sync["saleWallS"], sync["longestStallMs"]), (3, 30.0, 32))
        self.assertEqual(sync["faultSaid"], "nats3's host lost; nats1 leads it; a fresh nats3 in its place")
        self.assertEqual(sync["events"]["events"], 20)
        self.assertNotIn("longestStallMs", async_)
        self.assertEqual(sync["success"], 20, "the sale's own answers, not its vouchers' again")
        self.assertEqual(len(got["runs"]), 2, "a fault that never ran has no row")

    def test_a_run_that_could_not_run(self):
        # The row scripts/figures shows as "failed: no result".
        self.write("problems.txt", "sync db-kill: the run failed: Error: no voucher\n")
        shown, status = printed(chaos.COMMANDS["summary"], self.out, "sync", "db-kill")
        self.assertEqual(status, None)
        self.assertEqual(shown, json.dumps({"runs": [{
            "mode": "sync", "fault": "db-kill",
            "problems": ["sync db-kill: the run failed: Error: no voucher", "sync db-kill: no result of the load tool"],
            "passed": False}], "passed": False}, indent=1) + "\n")

    def test_the_fault_said_nothing(self):
        self.assertEqual(chaos.fault_said("POST x\n20/20 answered, 10/s\n"), "")
        self.assertEqual(chaos.fault_said("fault: redis paused\nError: the sale failed\n"), "redis paused")


class Findings(unittest.TestCase):
    def test_an_async_sale_with_its_202s_and_the_unsettled_resolved(self):
        checked = {"findings": {"requests": 30000, "unsettled": 41, "unsettledWithOrder": 3, "abnormalAfterHealMs": 1180,
                                "longestStallMs": 2204, "accepted": 120, "lastAnsweredMs": 1764450000000},
                   "fates": {"asked": 120, "confirmed": 118, "failed": 2, "pending": 0, "vanished": 0, "unanswered": 0},
                   "unsettledResolved": {"asked": 41, "holding": 3, "notHolding": 38, "toldWrong": 0}}
        self.assertEqual(chaos.findings(checked),
                         "30000 answers, 41 that settled nothing (3 of them with an order), normal again 1180 ms after "
                         "the fault ended, at most 2204 ms without a sale; of 120 answered 202: 118 CONFIRMED, 2 FAILED, "
                         "0 PENDING, 0 vanished; of 41 that settled nothing, their order list shows 3 holding and 38 not "
                         "(0 told wrong)")

    def test_a_sync_sale_that_was_never_abnormal(self):
        checked = {"findings": {"requests": 6000, "unsettled": 0, "unsettledWithOrder": 0, "abnormalAfterHealMs": None,
                                "longestStallMs": 612}, "fates": None,
                   "unsettledResolved": {"asked": 0, "holding": 0, "notHolding": 0, "toldWrong": 0}}
        self.assertEqual(chaos.findings(checked),
                         "6000 answers, 0 that settled nothing (0 of them with an order), normal again 0 ms after the "
                         "fault ended, at most 612 ms without a sale")


class Events(RunDir):
    def test_the_audit_of_the_sales_events(self):
        path = self.write("sync-events-relay-kill.json", {"audit": {"events": {
            "orderRows": 4000, "events": 4000, "wrong": 0, "withoutRow": 0, "viewsWrong": 0}}})
        shown, _ = printed(chaos.COMMANDS["events"], path)
        self.assertEqual(shown, "4000 order rows, 4000 events at the consumer, 0 rows with wrong events, "
                                "0 orders without a row, 0 views unlike their row\n")

    def test_a_load_tool_that_did_not_count_the_views(self):
        d = {"audit": {"events": {"orderRows": 4000, "events": 3998, "wrong": 2, "withoutRow": 1}}}
        self.assertEqual(chaos.events(d), "4000 order rows, 3998 events at the consumer, 2 rows with wrong events, "
                                          "1 orders without a row, ? views unlike their row")

    def test_no_audit_of_them(self):
        with self.assertRaises(KeyError):
            chaos.events({"audit": {"passed": True}})


if __name__ == "__main__":
    unittest.main()
