#!/usr/bin/env python3
"""timeline_browser.py GPUPOOL_RUN: a --timeline picture in a real browser.

Runs a small sweep (2 fake GPUs, some failures) with --timeline, has
headless Chromium take a screenshot of the SVG, and checks the PNG: the
size asked for, many colours, and pixels of the "ok" green and the
"failed" red (the bars were drawn, not an error page or a blank one).
Exit 0: it renders; 1: it does not; 77 (skip): no chromium installed.
"""
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

OK = (0x43, 0xA0, 0x47)
FAILED = (0xE5, 0x39, 0x35)
W, H = 1000, 200


def png_pixels(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB(A) PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    if depth != 8 or ctype not in (2, 6):
        raise ValueError("PNG depth %d colour type %d" % (depth, ctype))
    bpp = 3 if ctype == 2 else 4
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, None, []
    for y in range(h):
        ft = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        up = prev if prev is not None else bytearray(stride)
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = up[i]
            c = up[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pr = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pr) & 255
        prev = line
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
    return w, h, rows


def near(p, q):
    return all(abs(a - b) <= 8 for a, b in zip(p, q))


def main(run):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        print("no chromium: skipped")
        return 77
    with tempfile.TemporaryDirectory() as d:
        tasks = os.path.join(d, "tasks.txt")
        with open(tasks, "w") as f:
            for i in range(1, 13):
                f.write("sleep 0.%d%s\n" % (i % 3 + 1,
                                            "; exit 2" if i % 5 == 0 else ""))
        svg, png = os.path.join(d, "t.svg"), os.path.join(d, "t.png")
        rc = subprocess.run([run, "--fake-gpus", "2", "--quiet",
                             "--timeline", svg, tasks],
                            stdout=subprocess.DEVNULL, timeout=120).returncode
        if rc != 2:
            print("gpupool-run exited %d, not 2" % rc)
            return 1
        subprocess.run([browser, "--headless", "--disable-gpu",
                        "--no-sandbox", "--user-data-dir=" +
                        os.path.join(d, "profile"), "--screenshot=" + png,
                        "--window-size=%d,%d" % (W, H), "file://" + svg],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120, env=dict(os.environ, HOME=d))
        w, h, rows = png_pixels(png)
    px = [p for row in rows for p in row]
    colours = len(set(px))
    ok = sum(near(p, OK) for p in px)
    failed = sum(near(p, FAILED) for p in px)
    print("%dx%d, %d colours, %d ok pixels, %d failed pixels" %
          (w, h, colours, ok, failed))
    if (w, h) != (W, H) or colours < 10 or ok < 500 or failed < 50:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
