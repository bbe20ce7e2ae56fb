"""bench_keep's document (scripts/lib.sh): a bench's summary kept in
docs/bench/ with when, on which commit and machine, and by which command
it was made, and the lines it printed; scripts/figures makes the pages'
figures from these files.

    write SUMMARY_JSON KEPT COMMAND LINES_FILE NAME STARTED COMMIT DIRTY
        (LINES_FILE may be empty: no lines kept; DIRTY is true or false)
"""
import json
import os
import platform
import re
import sys
import time

from hmdptools import cli

COLOUR = re.compile(r"\x1b\[[0-9;]*m")


def _first(path, prefix, value, default):
    with open(path, encoding="utf-8") as f:
        return next((value(line) for line in f if line.startswith(prefix)), default)


def machine():
    """What the bench ran on: cores, CPU, memory, OS and kernel."""
    cpu = _first("/proc/cpuinfo", "model name", lambda line: line.split(":", 1)[1].strip(), "unknown")
    mem = _first("/proc/meminfo", "MemTotal", lambda line: int(line.split()[1]), None)
    os_name = _first("/etc/os-release", "PRETTY_NAME", lambda line: line.split("=", 1)[1].strip().strip('"'), "unknown")
    return {"cpus": os.cpu_count(), "cpu": cpu, "memGiB": round(mem / 2**20), "os": os_name, "kernel": platform.release()}


def document(results, command, lines, name, started, commit, dirty, ended, box):
    """The kept document: LINES (the printed lines, colour codes removed)
    only when given."""
    doc = {
        "bench": name,
        "started": started,
        "ended": ended,
        "commit": commit,
        "uncommittedChanges": dirty,
        "box": box,
        "command": command,
        "results": results,
    }
    if lines is not None:
        doc["lines"] = [COLOUR.sub("", line.rstrip("\n")) for line in lines]
    return doc


def write(doc, kept):
    with open(kept, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, ensure_ascii=False)
        f.write("\n")


def _write(summary, kept, command, lines, name, started, commit, dirty):
    ended = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(summary, encoding="utf-8") as f:
        results = json.load(f)
    printed = None
    if lines:
        with open(lines, encoding="utf-8") as f:
            printed = f.readlines()
    write(document(results, command, printed, name, started, commit, dirty == "true", ended, machine()), kept)


COMMANDS = {"write": _write}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
