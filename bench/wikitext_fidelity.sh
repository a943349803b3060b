#!/bin/bash
# Fidelity of ctrl's Wikipedia text against WikiExtractor's on the jawiki excerpt: per article and in
# total, characters kept, headings and list items kept, leftover markup per kind (entities included)
# and holes (empty brackets, dangling particles); then what each of ctrl's wikitext rules recovers.
# Writes bench/results/wikitext-fidelity-<date>.md and .svg (a chart of characters kept per article).
#   bench/wikitext_fidelity.sh
# Needs: build/extract_wikipedia and build/wikitext_rules (cmake --build build --target extract_wikipedia
# wikitext_rules; or $EXTRACT and $RULES), python3, and WikiExtractor from PyPI in its own venv $VENV
# (created and installed with pip on first use, as bench/wikiextractor_vs_ctrl.sh does).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/machine.sh
EXTRACT=${EXTRACT:-build/extract_wikipedia}
RULES=${RULES:-build/wikitext_rules}
VENV=${VENV:-/tmp/wikiextractor-venv}
SAMPLE=../shared/data/jawiki-excerpt.xml.bz2
DATE=$(date -u +%Y-%m-%d)
OUT=${OUT:-bench/results/wikitext-fidelity-$DATE}
WORK=$(mktemp -d /tmp/wikitext_fidelity.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

for tool in "$EXTRACT" "$RULES"; do
  [ -x "$tool" ] || { echo "build $tool first (cmake --build build --target extract_wikipedia wikitext_rules)" >&2; exit 1; }
done
if [ ! -x "$VENV/bin/wikiextractor" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q wikiextractor
fi
WE_VERSION=$("$VENV/bin/pip" show wikiextractor | awk '/^Version:/{print $2}')

# The excerpt stops without </mediawiki>; WikiExtractor gets it closed, ctrl reads it as it is.
bzcat "$SAMPLE" > "$WORK/jawiki.xml"
{ cat "$WORK/jawiki.xml"; echo "</mediawiki>"; } > "$WORK/jawiki-closed.xml"
"$VENV/bin/wikiextractor" --json --no-templates --processes 1 -q -o "$WORK/we" "$WORK/jawiki-closed.xml" 2>/dev/null
"$EXTRACT" "$SAMPLE" 1 --dump "$WORK/ctrl.txt" > /dev/null
python3 bench/wikitext_fidelity.py pages "$WORK/jawiki.xml" "$WORK/pages.jsonl"
"$RULES" "$WORK/pages.jsonl" > "$WORK/rules.md"

COMMIT=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src bench || echo "+changes")
CPU=$(cpu_model)
HEADER="# Wikipedia text fidelity: ctrl against WikiExtractor $WE_VERSION

\`bash bench/wikitext_fidelity.sh\` ($DATE, commit $COMMIT, $CPU, $(nproc) cores; load average
$(cut -d' ' -f1-3 /proc/loadavg) when run). Input: \`../shared/data/jawiki-excerpt.xml.bz2\`. WikiExtractor:
\`wikiextractor --json --no-templates --processes 1\` (PyPI, its own venv); ctrl:
\`build/extract_wikipedia <excerpt> 1 --dump\` (the Wikipedia reader, trailing sections dropped).
How each measure is taken: the docstring of bench/wikitext_fidelity.py. Chart: $(basename "$OUT").svg."
python3 bench/wikitext_fidelity.py report "$WORK/pages.jsonl" "$WORK/ctrl.txt" "$WORK/we" "$OUT.md.tmp" "$OUT.svg.tmp" "$HEADER"
# What each rule recovers goes before the per-article table.
python3 - "$OUT.md.tmp" "$WORK/rules.md" <<'PY'
import sys
md, rules = open(sys.argv[1], encoding="utf-8").read(), open(sys.argv[2], encoding="utf-8").read()
part = "## What each rule recovers\n\n`build/wikitext_rules` on the same articles: the non-space characters, lines and articles " \
       "that change when the rule alone is switched off (entities: a decoded reference is shorter than the reference).\n\n" + rules
md = md.replace("## Per article", part + "\n## Per article", 1)
open(sys.argv[1], "w", encoding="utf-8").write(md)
PY
mv "$OUT.md.tmp" "$OUT.md"
mv "$OUT.svg.tmp" "$OUT.svg"
echo "wrote $OUT.md and $OUT.svg"
