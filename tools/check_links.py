#!/usr/bin/env python3
"""Checks every markdown link to a file or #anchor in the given .md files:
the file exists (relative to the linking file) and the anchor is a heading
slug of the target (GitHub's rule). Prints bad links; exit 1 if any."""
import os, re, sys

def slugs(path):
    out, seen, fence = set(), {}, False
    for line in open(path, encoding='utf-8'):
        if line.lstrip().startswith('```'):
            fence = not fence
            continue
        if fence:
            continue
        m = re.match(r'^(#{1,6})\s+(.*?)\s*#*\s*$', line)
        if not m:
            continue
        t = m.group(2).strip().lower()
        t = re.sub(r'[^\w\- ]', '', t)   # keeps letters, digits, _, -, space (unicode aware)
        t = t.replace(' ', '-')
        n = seen.get(t, 0)
        seen[t] = n + 1
        out.add(t if n == 0 else f'{t}-{n}')
    return out

bad = 0
for f in sys.argv[1:]:
    text = open(f, encoding='utf-8').read()
    text = re.sub(r'```.*?```', '', text, flags=re.S)
    text = re.sub(r'`[^`\n]*`', '', text)
    for target in re.findall(r'\]\(([^)\s]+)\)', text):
        if re.match(r'^[a-z]+://', target) or target.startswith('mailto:'):
            continue
        path, _, anchor = target.partition('#')
        full = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
        if not os.path.exists(full):
            print(f'{f}: missing file {target}'); bad += 1; continue
        if anchor:
            if not full.endswith('.md'):
                print(f'{f}: anchor on non-markdown {target}'); bad += 1
            elif anchor not in slugs(full):
                print(f'{f}: missing anchor {target}'); bad += 1
sys.exit(1 if bad else 0)
