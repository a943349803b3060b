"""What the throughput benchmarks (train_vs_pytorch.sh, gpu_vs_pytorch.sh)
share when they report: their results folder (machine.txt and one JSON file
per run, named <preset>-<precision>-<who>-r<round>.json) and the chart."""
import glob
import json
import os
from xml.sax.saxutils import escape


def first_json(path):
    """The first JSON object in a file (a run may print text before it), or None."""
    text = open(path).read()
    start = text.find("{")
    try:
        return json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        return None


def read_results(out):
    """machine.txt as a dict, and {(preset, precision, who): [run JSON, ...]}."""
    machine = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(out, "machine.txt")))
    runs = {}
    for path in glob.glob(os.path.join(out, "*-r*.json")):
        preset, prec, who, _ = os.path.basename(path)[:-5].split("-", 3)
        r = first_json(path)
        if r:
            runs.setdefault((preset, prec, who), []).append(r)
    return machine, runs



def bars_svg(title, groups, unit=""):
    """Grouped horizontal bars: groups is [(group name, {run name: value})],
    each group drawn as a share of its largest value, ctrl in red and its
    peers in blue; returns the SVG text (title and names XML-escaped)."""
    row, gap, x0, width = 22, 18, 170, 520
    height = 40 + sum(len(g) * row + gap for _, g in groups)
    svg = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{x0 + width + 160}' height='{height}' "
           "font-family='sans-serif' font-size='12'>", "<rect width='100%' height='100%' fill='white'/>",
           f"<text x='10' y='22' font-size='14'>{escape(title)}</text>"]
    y = 40
    for name, values in groups:
        top = max(values.values())
        svg.append(f"<text x='10' y='{y + 14}' font-weight='bold'>{escape(name)}</text>")
        for who, v in values.items():
            w = width * v / top
            color = "#d62728" if who == "ctrl" else "#1f77b4"
            svg.append(f"<text x='{x0 - 6}' y='{y + 15}' text-anchor='end'>{escape(who)}</text>")
            svg.append(f"<rect x='{x0}' y='{y + 3}' width='{w:.1f}' height='{row - 6}' fill='{color}'/>")
            svg.append(f"<text x='{x0 + w + 4:.1f}' y='{y + 15}'>{v:,.0f}{unit}</text>")
            y += row
        y += gap
    svg.append("</svg>")
    return "\n".join(svg) + "\n"
