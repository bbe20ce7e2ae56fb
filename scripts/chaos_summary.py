#!/usr/bin/env python3
"""What a scripts/chaos run found, one row per mode and fault, as the JSON
that `KEEP=1 scripts/chaos` keeps in docs/bench/ (scripts/figures makes
docs/reliability.md's tables from it).

    scripts/chaos_summary.py OUT "MODES" "FAULTS"   # the summary, on stdout
    scripts/chaos_summary.py --self-test

OUT is the run's directory (.stack/chaos): per mode and fault the load
tool's JSON (MODE-FAULT.json), the history checker's (MODE-FAULT.check.json)
and the load tool's log (MODE-FAULT.log, where the fault says what it did);
problems.txt holds every problem found, a line each, `MODE FAULT: ...`.
"""

import json
import os
import re
import sys
import tempfile

PROGRESS = re.compile(r"\d+/\d+ answered, \d+/s")


def fault_said(log):
    """What the injected fault printed: the lines after the load tool's
    `fault: `, up to the next line of its progress."""
    if "fault: " not in log:
        return ""
    lines = []
    for line in log.split("fault: ", 1)[1].splitlines():
        if PROGRESS.match(line.strip()) or line.startswith(("Error", "Stack backtrace")):
            break
        lines.append(PROGRESS.sub("", line).strip())
    return "; ".join(line for line in lines if line)


def outcomes(report):
    return {row["label"]: row["samples"] for row in report.get("rows", []) if row["label"] != "TOTAL"}


def row(out, mode, fault, problems):
    base = os.path.join(out, f"{mode}-{fault}")
    found = {"mode": mode, "fault": fault,
             "problems": [p for p in problems if p.startswith(f"{mode} {fault}:")]}
    try:
        with open(base + ".json", encoding="utf-8") as f:
            load = json.load(f)
    except (OSError, ValueError):
        found["problems"].append(f"{mode} {fault}: no result of the load tool")
        return found
    audit = load.get("audit") or {}
    answers = audit.get("answers") or {}
    if not answers:  # a sale of several vouchers: the answers are each voucher's
        for voucher in load.get("voucherAudits") or []:
            for key, n in (voucher.get("answers") or {}).items():
                answers[key] = answers.get(key, 0) + n
    counts = outcomes(load.get("report") or {})
    found.update({
        "saleWallS": round((load.get("report") or {}).get("wallSecs", 0), 2),
        "stock": audit.get("initialStock"),
        "orders": audit.get("orders"),
        "oversold": audit.get("oversold"),
        "duplicatePairs": audit.get("duplicatePairs"),
        "success": answers.get("successOrders"),
        "successWithoutRow": answers.get("successWithoutRow"),
        "accepted": answers.get("acceptedOrders"),
        "unavailable": counts.get("SERVICE_UNAVAILABLE", 0) + counts.get("503", 0),
        "retried": load.get("retried") or 0,
        "outcomes": counts,
    })
    # A sale of several vouchers: the audit sums them, the events' audit
    # (of all at once) is told with the first voucher's.
    events = audit.get("events") or next(
        (v["events"] for v in load.get("voucherAudits") or [] if v.get("events")), None)
    if events:
        found["events"] = {k: events.get(k) for k in ("orderRows", "events", "wrong", "withoutRow")}
    try:
        with open(base + ".check.json", encoding="utf-8") as f:
            findings = json.load(f)["findings"]
        found["longestStallMs"] = findings.get("longestStallMs")
    except (OSError, ValueError, KeyError):
        pass
    try:
        with open(base + ".log", encoding="utf-8", errors="replace") as f:
            found["faultSaid"] = fault_said(f.read())
    except OSError:
        pass
    found["passed"] = not found["problems"]
    return found


def summary(out, modes, faults):
    try:
        with open(os.path.join(out, "problems.txt"), encoding="utf-8") as f:
            problems = [line.strip() for line in f if line.strip()]
    except OSError:
        problems = []
    rows = [row(out, mode, fault, problems) for mode in modes.split() for fault in faults.split()
            if os.path.exists(os.path.join(out, f"{mode}-{fault}.json"))
            or any(p.startswith(f"{mode} {fault}:") for p in problems)]
    return {"runs": rows, "passed": all(r["passed"] for r in rows)}


def self_test():
    with tempfile.TemporaryDirectory() as out:
        load = {"report": {"wallSecs": 30.0012, "rows": [
            {"label": "success", "samples": 20}, {"label": "SERVICE_UNAVAILABLE", "samples": 3},
            {"label": "TOTAL", "samples": 23}]},
            "audit": {"initialStock": 20, "orders": 20, "oversold": 0, "duplicatePairs": 0,
                      "answers": {"successOrders": 20, "successWithoutRow": 0, "acceptedOrders": 0}},
            "voucherAudits": [{"voucherId": 1, "answers": {"successOrders": 5}}, {"voucherId": 2, "events": {"orderRows": 20, "events": 20, "wrong": 0,
                                                                        "withoutRow": 0}}]}
        for mode in ("sync", "async"):
            with open(os.path.join(out, f"{mode}-lost-x.json"), "w", encoding="utf-8") as f:
                json.dump(load, f)
        with open(os.path.join(out, "sync-lost-x.check.json"), "w", encoding="utf-8") as f:
            json.dump({"findings": {"longestStallMs": 32}}, f)
        with open(os.path.join(out, "sync-lost-x.log"), "w", encoding="utf-8") as f:
            f.write("POST x\n10/20 answered, 9/s     fault: nats3's host lost; nats1 leads it\n"
                    "a fresh nats3 in its place\n20/20 answered, 10/s     \nAggregate report\n")
        with open(os.path.join(out, "problems.txt"), "w", encoding="utf-8") as f:
            f.write("async lost-x: 1 answer 200 without a row\n")
        got = summary(out, "sync async", "lost-x lost-y")
    sync, async_ = got["runs"]
    assert not got["passed"] and sync["passed"] and not async_["passed"], got
    assert sync["unavailable"] == 3 and sync["saleWallS"] == 30.0 and sync["longestStallMs"] == 32, sync
    assert sync["faultSaid"] == "nats3's host lost; nats1 leads it; a fresh nats3 in its place", sync["faultSaid"]
    assert sync["events"]["events"] == 20 and "longestStallMs" not in async_, async_
    assert sync["success"] == 20, "the sale's own answers, not its vouchers' again"
    assert len(got["runs"]) == 2, "a fault that never ran has no row"
    print("chaos_summary self-test: rows, problems, the fault's words and the checker's stall each read")


def main():
    if sys.argv[1:] == ["--self-test"]:
        self_test()
        return 0
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    json.dump(summary(*sys.argv[1:4]), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
