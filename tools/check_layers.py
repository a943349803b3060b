#!/usr/bin/env python3
"""Checks that every #include "x/..." under src/ is allowed by the layer table
in docs/design.md (rows "| `a/`, `b/` | `core`, `ops` ... |"; a row whose
second column says "everything" is not checked). Prints each violation as
FILE:LINE: and exits 1 if there is one.

usage: check_layers.py DESIGN_MD SRC_DIR
"""
import os
import re
import sys


def allowed_includes(design_md):
    allowed = {}
    for line in open(design_md, encoding="utf-8"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].startswith("`"):
            continue
        layers = re.findall(r"`([a-z_]+)/`", cells[0])
        uses = None if cells[1].startswith("everything") else set(re.findall(r"`([a-z_]+)`", cells[1]))
        for layer in layers:
            allowed[layer] = uses
    return allowed


def main():
    design_md, src = sys.argv[1], sys.argv[2]
    allowed = allowed_includes(design_md)
    if not allowed:
        sys.exit(f"{design_md}: no layer table found")
    bad = 0
    for layer in sorted(os.listdir(src)):
        if not os.path.isdir(os.path.join(src, layer)):
            continue
        if layer not in allowed:
            print(f"{src}/{layer}: layer missing from the table in {design_md}")
            bad += 1
            continue
        if allowed[layer] is None:
            continue
        for root, _, files in os.walk(os.path.join(src, layer)):
            for name in sorted(files):
                path = os.path.join(root, name)
                for number, line in enumerate(open(path, encoding="utf-8", errors="replace"), 1):
                    m = re.match(r'\s*#\s*include\s+"([a-z_]+)/', line)
                    if m and m.group(1) != layer and m.group(1) not in allowed[layer]:
                        print(f"{path}:{number}: {layer}/ includes {m.group(1)}/, which {design_md} does not allow")
                        bad += 1
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
