"""The bench scripts' medians, written once: every script that runs a
sale RUNS times reports each figure as the median of its runs and their
spread, so no headline figure is worked out by hand."""
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
