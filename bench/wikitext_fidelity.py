#!/usr/bin/env python3
"""Fidelity of ctrl's Wikipedia text against WikiExtractor's, article by article (bench/wikitext_fidelity.sh).

    wikitext_fidelity.py pages <dump.xml> <pages.jsonl>
        the pages of a MediaWiki XML export as {"title", "ns", "redirect", "text"} lines (the wikitext
        as MediaWiki stores it, XML escapes undone), for bench/wikitext_rules.
    wikitext_fidelity.py report <pages.jsonl> <ctrl dump> <wikiextractor dir> <out.md> <out.svg> <header>
        compares the two outputs on the articles ctrl keeps (namespace 0, no redirects or disambiguation
        pages) and writes a Markdown table and an SVG chart.

What is measured, per article and in total:
  - characters: non-space characters of the text (WikiExtractor's JSON text is HTML-escaped by the
    tool, so it is unescaped once first, as any user of it must);
  - headings and list items: those of the wikitext outside the trailing sections (脚注, 参考文献,
    関連項目, …, the sections ctrl drops), each reduced by a small reference cleaner to the pieces of
    text between its markup; an item counts as kept when every piece of 2+ characters appears in the
    output (a heading: as a line of its own, WikiExtractor writes it with a final '.');
  - leftover markup per kind: {{ }}, [[ ]], '' quotes, HTML tags, character references (named,
    decimal, hex), table lines ({| |} |- !), __MAGIC__ words, [http links, comments; a match that is the
    article's own text, written with <nowiki> so that it shows, is not leftover markup;
  - holes: empty brackets "（）" "( )" "「」" "『』", a comma next to a bracket "（、" "、）", and dangling
    particles: a particle followed only by blank space and then punctuation or another particle
    ("は 、", "は から"), which is what a dropped template or formula leaves; a match that is the
    article's own text (found, with a character either side, in the wikitext) is not a hole.
  - WikiExtractor appends '.' to every heading; those periods are not counted as characters kept.
"""
import glob
import html
import json
import re
import sys
from xml.sax.saxutils import unescape

TRAILING = ["脚注", "注釈", "出典", "参考文献", "関連項目", "外部リンク", "参考", "関連書籍", "外部サイト", "注",
            "参照", "関連文献", "参考資料", "註釈", "脚注・出典", "出典・脚注", "注釈・出典", "脚注・参考文献",
            "参考文献・脚注", "see also", "references", "external links", "notes", "further reading",
            "bibliography", "sources"]
TRAILING_PREFIX = ["脚注", "出典", "参考文献", "外部リンク", "関連項目"]

MARKUP = {
    "{{ }}": re.compile(r"\{\{|\}\}"),
    "[[ ]]": re.compile(r"\[\[|\]\]"),
    "'' quotes": re.compile(r"''"),
    "tags": re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?=[\s>/])[^<>\n]{0,200}>"),
    "entities": re.compile(r"&(?:[A-Za-z][A-Za-z0-9]{1,31}|#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6});"),
    "table lines": re.compile(r"(?m)^[ \t]*(?:\{\||\|\}|\|-|\|\+|!)"),
    "__MAGIC__": re.compile(r"__[A-Z]{3,}__"),
    "[http": re.compile(r"\[(?:https?:)?//"),
    "comments": re.compile(r"<!--|-->"),
}
PARTICLE = r"(?:は|が|を|に|の|と|で|へ|も|から|まで|より)"
HOLES = {
    "empty brackets": re.compile(r"（[ 　\u00a0]*）|\([ 　\u00a0]*\)|「[ 　]*」|『[ 　]*』"),
    "comma at bracket": re.compile(r"[（(][ 　]*[、,]|[、,][ 　]*[）)]"),
    "dangling particle": re.compile(PARTICLE + r"[ 　]+(?=[、。，．）)」』]|" + PARTICLE + r"[ 　、。])"),
}


def non_space(s: str) -> int:
    return sum(1 for c in s if not c.isspace())


def read_pages(xml_path: str):
    text = open(xml_path, encoding="utf-8").read()
    for m in re.finditer(r"<page>(.*?)</page>", text, re.S):
        p = m.group(1)
        title = unescape(re.search(r"<title>(.*?)</title>", p, re.S).group(1), {"&quot;": '"'})
        ns = re.search(r"<ns>(.*?)</ns>", p).group(1)
        t = re.search(r"<text[^>]*?(?:/>|>(.*?)</text>)", p, re.S)
        wikitext = unescape((t.group(1) if t else "") or "", {"&quot;": '"'})
        yield {"title": title, "ns": ns, "redirect": "<redirect" in p, "text": wikitext}


def kept_article(page) -> bool:
    if page["ns"] != "0" or page["redirect"]:
        return False
    head = page["text"].lstrip()[:16].lower()
    if head.startswith("#redirect") or head.startswith("#転送"):
        return False
    names = {"aimai", "曖昧さ回避", "人名の曖昧さ回避", "地名の曖昧さ回避", "disambig", "dab", "disambiguation", "山の曖昧さ回避"}
    return not any(m.group(1).strip().lower() in names for m in re.finditer(r"\{\{([^|}\n{]{1,60})", page["text"]))


def pieces(markup: str):
    """The pieces of plain text in a line of wikitext, split where markup (templates, tags, refs) was."""
    s = re.sub(r"<ref[^>]*/>|<ref[^>]*>.*?</ref>|<!--.*?-->", "\0", markup, flags=re.S)
    for _ in range(5):  # innermost templates first
        s = re.sub(r"\{\{[^{}]*\}\}", "\0", s)
    s = re.sub(r"\[\[(?:[^\[\]|]*\|)?([^\[\]]*)\]\]", r"\1", s)
    s = re.sub(r"\[(?:https?:)?//[^\s\]]+\s*([^\]]*)\]", r"\1", s)
    s = re.sub(r"</?[a-zA-Z][^<>]*>", "\0", s)
    s = re.sub(r"'{2,}", "", s)
    s = html.unescape(s)
    return [p for p in (re.sub(r"\s+", "", x) for x in s.split("\0")) if len(p) >= 2 and not re.search(r"[{}\[\]|=<>]", p)]


def is_trailing(heading: str) -> bool:
    h = heading.strip().lower()
    return h in TRAILING or any(h.startswith(p) for p in TRAILING_PREFIX)


def body_structure(wikitext: str):
    """(headings, list items) outside the trailing sections (脚注, 参考文献 … with their subsections,
    up to the next heading of their level that is not one), each as its text pieces."""
    headings, items = [], []
    skip = 0
    for line in wikitext.split("\n"):
        m = re.match(r"^(={1,6})\s*(.+?)\s*\1\s*$", line)
        if m:
            ps = pieces(m.group(2))
            level = len(m.group(1))
            if skip and level > skip:
                continue
            skip = level if is_trailing("".join(ps)) else 0
            if ps and not skip:
                headings.append("".join(ps))
            continue
        if skip:
            continue
        m = re.match(r"^([*#:;]+)\s*(.*)$", line)
        if m and not line.startswith(("{|", "|")):
            # ";term:definition" is two items, the term and its definition, as the page shows them: split at
            # the first colon outside brackets ([[CSI:科学捜査班]], [http://…] keep theirs)
            parts, depth = [m.group(2)], 0
            for i, c in enumerate(m.group(2) if m.group(1).endswith(";") else ""):
                depth += 1 if c in "[{" else -1 if c in "]}" and depth > 0 else 0
                if c == ":" and depth == 0:
                    parts = [m.group(2)[:i], m.group(2)[i + 1:]]
                    break
            for part in parts:
                ps = pieces(part)
                if ps:
                    items.append(ps)
    return headings, items


def measure(text: str, source: str, headings, items, heading_suffix=""):
    squashed = re.sub(r"\s+", "", text)
    lines = {re.sub(r"\s+", "", l).rstrip(heading_suffix) if heading_suffix else re.sub(r"\s+", "", l)
             for l in text.split("\n")}
    if heading_suffix:  # the '.' WikiExtractor appends to each heading is not text of the article
        wanted = set(headings)
        text = "\n".join(l[:-len(heading_suffix)] if l.endswith(heading_suffix) and
                         re.sub(r"\s+", "", l[:-len(heading_suffix)]) in wanted else l for l in text.split("\n"))
    body = text
    if heading_suffix:  # WikiExtractor keeps the trailing sections (脚注, 参考文献 …) that ctrl drops
        kept, skip = [], False
        for l in text.split("\n"):
            if l.endswith(heading_suffix) and len(l) < 40 and is_trailing(l[:-len(heading_suffix)]):
                skip = True  # WikiExtractor's text does not tell the level: up to the next heading
            elif skip and re.sub(r"\s+", "", l) in set(headings):
                skip = False
            if not skip:
                kept.append(l)
        body = "\n".join(kept)
    r = {
        "chars": non_space(text),
        "body chars": non_space(body),
        "headings": sum(1 for h in headings if h in lines),
        "items": sum(1 for ps in items if all(p in squashed for p in ps)),
    }
    for kind, rx in MARKUP.items():
        r["markup:" + kind] = sum(1 for m in rx.finditer(text) if not nowiki_text(text, m, source))
    for kind, rx in HOLES.items():
        r["hole:" + kind] = sum(1 for m in rx.finditer(text) if not in_source(text, m, source, kind))
    r["markup"] = sum(v for k, v in r.items() if k.startswith("markup:"))
    r["holes"] = sum(v for k, v in r.items() if k.startswith("hole:"))
    return r


def nowiki_text(text: str, m, source: str) -> bool:
    """Whether a markup match is the article's own text, written with <nowiki> so that it shows (プログラミング言語's
    EBNF writes ['+''-'] as [<nowiki>'</nowiki>+<nowiki>'</nowiki><nowiki>'</nowiki>-…): the match with two
    characters either side is in the wikitext once its tags are removed, but not in the wikitext as written."""
    window = text[max(0, m.start() - 2):m.end() + 2]
    return window not in source and window in re.sub(r"<[^<>\n]*>", "", source)


def in_source(text: str, m, source: str, kind: str = "") -> bool:
    """Whether a hole pattern is the article's own text: the match, with a character either side, is
    in the wikitext as written, tags aside ("（）内は全国平均", the Lisp "()", TeX "S\\,)")."""
    source = re.sub(r"<[^<>\n]*>", "", source)
    if kind == "dangling particle":  # the particle, the blank space and what follows it
        return text[m.start():m.end() + 2] in source
    return (text[max(0, m.start() - 1):m.end()] in source) or (text[m.start():m.end() + 1] in source)


def read_ctrl_dump(path: str, titles):
    """extract_wikipedia --dump: "# title" line, text, blank line; documents in page order."""
    docs, current, expected = {}, None, list(titles)
    k = 0
    for line in open(path, encoding="utf-8").read().split("\n"):
        if k < len(expected) and line == "# " + expected[k]:
            current = expected[k]
            docs[current] = []
            k += 1
        elif k < len(expected) and line.startswith("# ") and line[2:] in expected[k:]:
            k = expected.index(line[2:], k)
            current = expected[k]
            docs[current] = []
            k += 1
        elif current is not None:
            docs[current].append(line)
    return {t: "\n".join(ls).strip("\n") for t, ls in docs.items()}


def read_wikiextractor(directory: str):
    docs = {}
    for f in sorted(glob.glob(directory + "/*/wiki_*")):
        for line in open(f, encoding="utf-8"):
            d = json.loads(line)
            docs[d["title"]] = html.unescape(d["text"])  # the tool HTML-escapes its output
    return docs


def svg_chart(path: str, rows, totals):
    """Per article: ctrl's characters against WikiExtractor's (log-log), with y = x and y = 1.4x."""
    import math
    W, H, L, B, T, R = 720, 560, 70, 60, 50, 20
    pts = [(r["we"]["chars"], r["ctrl"]["chars"], r["title"]) for r in rows if r["we"]["chars"] > 0 and r["ctrl"]["chars"] > 0]
    lo = 10 ** math.floor(math.log10(min(min(p[0], p[1]) for p in pts)))
    hi = 10 ** math.ceil(math.log10(max(max(p[0], p[1]) for p in pts)))
    def sx(v): return L + (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (W - L - R)
    def sy(v): return H - B - (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo)) * (H - B - T)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W/2}" y="22" text-anchor="middle" font-size="15">Non-space characters kept per article: ctrl vs WikiExtractor 3.1.0</text>',
           f'<text x="{W/2}" y="{H-15}" text-anchor="middle">WikiExtractor (--json --no-templates), characters</text>',
           f'<text x="18" y="{H/2}" text-anchor="middle" transform="rotate(-90 18 {H/2})">ctrl, characters</text>']
    d = lo
    while d <= hi:
        out.append(f'<line x1="{sx(d):.1f}" y1="{T}" x2="{sx(d):.1f}" y2="{H-B}" stroke="#ddd"/>')
        out.append(f'<line x1="{L}" y1="{sy(d):.1f}" x2="{W-R}" y2="{sy(d):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{sx(d):.1f}" y="{H-B+16}" text-anchor="middle">{d:g}</text>')
        out.append(f'<text x="{L-6}" y="{sy(d)+4:.1f}" text-anchor="end">{d:g}</text>')
        d *= 10
    out.append(f'<rect x="{L}" y="{T}" width="{W-L-R}" height="{H-B-T}" fill="none" stroke="#444"/>')
    for k, colour, label in ((1.0, "#888", "y = x"), (1.4, "#c60", "y = 1.4x")):
        x2 = min(hi, hi / k)
        out.append(f'<line x1="{sx(lo):.1f}" y1="{sy(lo*k):.1f}" x2="{sx(x2):.1f}" y2="{sy(x2*k):.1f}" stroke="{colour}" stroke-dasharray="5,4"/>')
        out.append(f'<text x="{sx(x2)-4:.1f}" y="{sy(x2*k)+14:.1f}" text-anchor="end" fill="{colour}">{label}</text>')
    for x, y, title in pts:
        colour = "#1f77b4" if y >= x else "#d62728"
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{colour}" fill-opacity="0.7"><title>{html.escape(title)}: {y} vs {x}</title></circle>')
    c, w = totals["ctrl"]["chars"], totals["we"]["chars"]
    out.append(f'<text x="{L+10}" y="{T+18}">total: ctrl {c:,}, WikiExtractor {w:,} ({c/w:.2f}×); {len(pts)} articles</text>')
    below = sum(1 for x, y, _ in pts if y < x)
    out.append(f'<text x="{L+10}" y="{T+34}">articles below y = x (red): {below}</text>')
    out.append("</svg>")
    open(path, "w", encoding="utf-8").write("\n".join(out) + "\n")


def report(pages_path, ctrl_path, we_dir, md_path, svg_path, header):
    pages = [json.loads(l) for l in open(pages_path, encoding="utf-8")]
    articles = [p for p in pages if kept_article(p)]
    ctrl = read_ctrl_dump(ctrl_path, [p["title"] for p in articles])
    we = read_wikiextractor(we_dir)
    rows = []
    for p in articles:
        headings, items = body_structure(p["text"])
        rows.append({"title": p["title"], "n_headings": len(headings), "n_items": len(items),
                     "ctrl": measure(ctrl.get(p["title"], ""), p["text"], headings, items),
                     "we": measure(we.get(p["title"], ""), p["text"], headings, items, heading_suffix=".")})
    keys = list(rows[0]["ctrl"].keys())
    totals = {tool: {k: sum(r[tool][k] for r in rows) for k in keys} for tool in ("ctrl", "we")}
    n_headings = sum(r["n_headings"] for r in rows)
    n_items = sum(r["n_items"] for r in rows)
    below = [r for r in rows if r["ctrl"]["chars"] < r["we"]["chars"]]
    below_body = [r for r in rows if r["ctrl"]["body chars"] < r["we"]["body chars"]]
    md = [header, "",
          f"{len(rows)} articles (namespace 0, no redirects or disambiguation pages); {len(ctrl)} ctrl documents, "
          f"{sum(1 for p in articles if p['title'] in we)} of them also in WikiExtractor's output.", "",
          "## Totals", "", "| measure | ctrl | WikiExtractor 3.1.0 |", "| --- | ---: | ---: |",
          f"| non-space characters | {totals['ctrl']['chars']:,} | {totals['we']['chars']:,} "
          f"(ctrl/WikiExtractor {totals['ctrl']['chars'] / totals['we']['chars']:.2f}×) |",
          f"| non-space characters outside the trailing sections (脚注, 参考文献 …, which ctrl drops) | {totals['ctrl']['body chars']:,} "
          f"| {totals['we']['body chars']:,} (ctrl/WikiExtractor {totals['ctrl']['body chars'] / totals['we']['body chars']:.2f}×) |",
          f"| articles where ctrl keeps fewer characters: all text / outside the trailing sections | "
          f"{len(below)} ({', '.join(r['title'] for r in below) or 'none'}) / {len(below_body)} | |",
          f"| headings kept (of {n_headings}) | {totals['ctrl']['headings']:,} | {totals['we']['headings']:,} |",
          f"| list items kept (of {n_items}) | {totals['ctrl']['items']:,} ({100 * totals['ctrl']['items'] / max(1, n_items):.1f}%) "
          f"| {totals['we']['items']:,} ({100 * totals['we']['items'] / max(1, n_items):.1f}%) |"]
    for k in keys:
        if k.startswith("markup:") or k.startswith("hole:"):
            kind = ("leftover " if k.startswith("markup:") else "") + k.split(":", 1)[1]
            md.append(f"| {kind} | {totals['ctrl'][k]:,} | {totals['we'][k]:,} |")
    md += ["", "Leftover markup and holes in ctrl's text, where there are any:", ""]
    shown = 0
    for r in rows:
        text = ctrl.get(r["title"], "")
        for kind, rx in list(MARKUP.items()) + list(HOLES.items()):
            for m in rx.finditer(text):
                source = next(p["text"] for p in articles if p["title"] == r["title"])
                if kind in HOLES and in_source(text, m, source, kind):
                    continue
                if kind in MARKUP and nowiki_text(text, m, source):
                    continue
                if shown < 40:
                    ctx = text[max(0, m.start() - 30):m.end() + 30].replace("\n", "⏎").replace("|", "\\|")
                    md.append(f"- {r['title']} ({kind}): …{ctx}…")
                shown += 1
    if shown == 0:
        md.append("- none")
    elif shown > 40:
        md.append(f"- … {shown - 40} more")
    md += ["", "## Per article", "",
           "| article | chars ctrl | chars WE | ratio | WE outside trailing sections | headings ctrl/WE/of | items ctrl/WE/of | markup ctrl/WE | holes ctrl/WE |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        c, w = r["ctrl"], r["we"]
        ratio = f"{c['chars'] / w['chars']:.2f}" if w["chars"] else "–"
        md.append(f"| {r['title']} | {c['chars']:,} | {w['chars']:,} | {ratio} | {w['body chars']:,} | {c['headings']}/{w['headings']}/{r['n_headings']} "
                  f"| {c['items']}/{w['items']}/{r['n_items']} | {c['markup']}/{w['markup']} | {c['holes']}/{w['holes']} |")
    open(md_path, "w", encoding="utf-8").write("\n".join(md) + "\n")
    svg_chart(svg_path, rows, totals)
    print("\n".join(md[:20 + len(MARKUP) + len(HOLES)]))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "pages":
        with open(sys.argv[3], "w", encoding="utf-8") as out:
            for page in read_pages(sys.argv[2]):
                out.write(json.dumps(page, ensure_ascii=False) + "\n")
    elif len(sys.argv) == 8 and sys.argv[1] == "report":
        report(*sys.argv[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
