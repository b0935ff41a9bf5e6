"""fmt.py: figures as the page and the log write them."""
from common import MIB


def fmt_s(s, f="%.3f", scale=1.0):
    if not s:
        return "-"
    if s["n"] == 1:
        return f % (s["median"] * scale)
    return (f + " [" + f + "-" + f + "]") % (
        s["median"] * scale, s["min"] * scale, s["max"] * scale)


def fmt_m(s, f="%.2f", scale=1.0):
    return f % (s["median"] * scale) if s else "-"


def fmt_n(n):
    n = int(n)
    e = len(str(n)) - 1
    return "10^%d" % e if n == 10 ** e else str(n)


def fmt_si(s):
    if not s:
        return "-"
    x = s["median"]
    for unit, div in (("M", 1e6), ("k", 1e3)):
        if x >= div:
            return "%.2f%s" % (x / div, unit)
    return "%.1f" % x


def fmt_bytes(b):
    for unit, div in (("MiB", MIB), ("KiB", 1024)):
        if b >= div and b % div == 0:
            return "%d %s" % (b // div, unit)
    return "%d B" % b
