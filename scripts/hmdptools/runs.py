"""The load tool's JSON of one run (`seckill-load --json`, `seckill-load
crowd --json`), read as every bench reads it."""
import json
import os


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def dump(doc, path, indent=2):
    """A summary the scripts keep: json.dump's text, no newline after it."""
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=indent)


def runs_of(out, prefix, runs):
    """This invocation's runs, every one of them: a missing file is a run
    that wrote nothing, not one to leave out of the medians."""
    return [load(f"{out}/{prefix}-{i}.json") for i in range(1, runs + 1)]


def total(d):
    """The aggregate report's TOTAL row."""
    return next(r for r in d["report"]["rows"] if r["label"] == "TOTAL")


def verdict(passed):
    return "PASS" if passed else "FAIL"


def name_of(path):
    """A run's name: its file's, without `.json`."""
    return os.path.basename(path)[:-5]


def wall(secs):
    """A wall in seconds as the lines show it: to the millisecond, or None
    (no row landed)."""
    return secs if secs is None else round(secs, 3)
