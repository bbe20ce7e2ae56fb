"""The bench scripts' medians, written once: every script that runs a
sale RUNS times reports each figure as the median of its runs and their
spread, so no headline figure is worked out by hand. The scripts' Python
summaries import this (`bench_python` in lib.sh puts scripts/ on the path).
"""
import statistics


def spread(xs):
    """The median of the runs' figures, their spread and how many runs gave
    one; None when none did (a sale that wrote no figure is not a zero)."""
    xs = list(xs)
    if not xs:
        return None
    return {"median": statistics.median(xs), "min": min(xs), "max": max(xs), "n": len(xs)}


def show(s, unit="", fmt=".2f", runs=False):
    """`median unit (min-max)`, with the number of runs when asked; "-" for
    a figure no run gave."""
    if not s:
        return "-"
    count = f', {s["n"]} runs' if runs else ""
    return f'{s["median"]:{fmt}}{unit} ({s["min"]:{fmt}}-{s["max"]:{fmt}}{count})'


def ratio(s, base):
    """The ratio of two medians, or None when either is missing."""
    if not s or not base or not base["median"]:
        return None
    return s["median"] / base["median"]


if __name__ == "__main__":
    # A self-test, run by scripts/test beside the figures' own.
    s = spread([3.0, 1.0, 2.0, 10.0])
    assert s == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}, s
    assert spread([]) is None
    assert show(s, " s") == "2.50 s (1.00-10.00)", show(s, " s")
    assert show(s, "", ".0f", runs=True) == "2 (1-10, 4 runs)", show(s, "", ".0f", runs=True)
    assert show(None, " s") == "-"
    assert ratio(spread([4.0]), spread([2.0])) == 2.0
    assert ratio(None, s) is None and ratio(s, spread([0.0])) is None
    print("medians: self-test passed")
