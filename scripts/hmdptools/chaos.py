"""What scripts/chaos makes of its runs: the history checker's findings in
a line, the order events' audit in a line, and the summary of every run,
one row per mode and fault, as the JSON that `KEEP=1 scripts/chaos` keeps
in docs/bench/ (scripts/figures makes docs/reliability.md's tables from it).

    findings CHECK_JSON        the checker's findings (`seckill-load check-history`)
    events JSON                the load tool's audit of the sale's order events
    summary OUT "MODES" "FAULTS"   the summary, on stdout

OUT is the run's directory (.stack/chaos): per mode and fault the load
tool's JSON (MODE-FAULT.json), the history checker's (MODE-FAULT.check.json)
and the load tool's log (MODE-FAULT.log, where the fault says what it did);
problems.txt holds every problem found, a line each, `MODE FAULT: ...`.
"""

import json
import os
import re
import sys

from hmdptools import cli

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
        found["passed"] = False
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


def findings(checked):
    """The checker's findings in a line."""
    f, fates = checked["findings"], checked.get("fates")
    line = (f'{f["requests"]} answers, {f["unsettled"]} that settled nothing ({f["unsettledWithOrder"]} of them with an order), '
            f'normal again {f["abnormalAfterHealMs"] or 0} ms after the fault ended, at most {f["longestStallMs"]} ms without a sale')
    if fates and fates["asked"]:
        line += (f'; of {fates["asked"]} answered 202: {fates["confirmed"]} CONFIRMED, {fates["failed"]} FAILED, '
                 f'{fates["pending"]} PENDING, {fates["vanished"]} vanished')
    resolved = checked.get("unsettledResolved")
    if resolved and resolved["asked"]:
        line += (f'; of {resolved["asked"]} that settled nothing, their order list shows {resolved["holding"]} holding '
                 f'and {resolved["notHolding"]} not ({resolved["toldWrong"]} told wrong)')
    return line


def events(load):
    """The audit of the sale's order events at a consumer, in a line."""
    e = load["audit"]["events"]
    return ("{orderRows} order rows, {events} events at the consumer, {wrong} rows with wrong events, "
            "{withoutRow} orders without a row".format(**e)
            + ", {} views unlike their row".format(e.get("viewsWrong", "?")))


def _read(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _summary(out, modes, faults):
    json.dump(summary(out, modes, faults), sys.stdout, indent=1)
    print()


COMMANDS = {
    "findings": lambda path: print(findings(_read(path))),
    "events": lambda path: print(events(_read(path))),
    "summary": _summary,
}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
