#!/usr/bin/env python3
"""timeline_svg.py: a --timeline picture, parsed as XML and summed up one
line per thing, for check_timeline.c to assert on (a parse error exits 1):

    size BYTES
    key KIND COUNT          the legend: colour name and attempts
    row LABEL               in drawing order
    bar KIND Y TITLE        each attempt drawn alone (title's lines joined
                            by " | "); KIND from its fill, via the legend
    strip KIND TITLE        each run of merged attempts
    untitled N              bars and strips without a <title>
"""
import os
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"


def main(path):
    root = ET.parse(path).getroot()
    print("size", os.path.getsize(path))
    kinds = {}
    keys = [e for e in root.iter() if e.get("class") in ("key",)]
    texts = list(root.iter(NS + "text"))
    for k in keys:
        # The key's text is the next <text> after its swatch.
        x = float(k.get("x")) + 14
        t = [t for t in texts if t.get("x") and abs(float(t.get("x")) - x) < 0.5
             and t.get("y") == "37"][0]
        name, count = t.text.rsplit(" ", 1)
        kinds[k.get("fill")] = name.replace(" ", "_")
        print("key", name.replace(" ", "_"), count)
    for t in texts:
        if t.get("class") == "label":
            print("row", t.text)
    untitled = 0
    for e in root.iter(NS + "rect"):
        c = e.get("class")
        if c not in ("bar", "strip"):
            continue
        title = e.find(NS + "title")
        if title is None:
            untitled += 1
            continue
        text = " | ".join(title.text.split("\n"))
        kind = kinds.get(e.get("fill"), "?" + str(e.get("fill")))
        if c == "bar":
            print("bar", kind, e.get("y"), text)
        else:
            print("strip", kind, text)
    print("untitled", untitled)


if __name__ == "__main__":
    main(sys.argv[1])
