#!/bin/bash
# ctrl's Wikipedia extraction against WikiExtractor (PyPI wikiextractor, --json --no-templates, one process)
# on the same XML, in one run; prints both throughputs (MB/s of XML, pages/s), per core, and the ratio.
#   bench/wikiextractor_vs_ctrl.sh [copies of the sample, default 4]
# Needs: build/extract_wikipedia (or $EXTRACT), python3 venv with wikiextractor in $VENV
# (created and installed with pip on first use).
set -euo pipefail
cd "$(dirname "$0")/.."
COPIES=${1:-4}
EXTRACT=${EXTRACT:-build/extract_wikipedia}
VENV=${VENV:-/tmp/wikiextractor-venv}
SAMPLE=../shared/data/jawiki-excerpt.xml.bz2
WORK=$(mktemp -d /tmp/wikiextractor_vs_ctrl.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

[ -x "$EXTRACT" ] || { echo "build $EXTRACT first (make extract_wikipedia)" >&2; exit 1; }
if [ ! -x "$VENV/bin/wikiextractor" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q wikiextractor
fi

# The sample's pages, repeated COPIES times inside one <mediawiki> (the sample itself stops without </mediawiki>).
XML="$WORK/jawiki.xml"
bzcat "$SAMPLE" > "$WORK/one.xml"
{
  sed -n '1,/<\/siteinfo>/p' "$WORK/one.xml"
  for _ in $(seq "$COPIES"); do sed -n '/<\/siteinfo>/,$p' "$WORK/one.xml" | tail -n +2; done
  echo "</mediawiki>"
} > "$XML"
MB=$(python3 -c "import os; print(os.path.getsize('$XML') / 1e6)")
PAGES=$(grep -c '<page>' "$XML")
echo "input: $PAGES pages, $MB MB of XML ($COPIES copies of the jawiki sample)"

# WikiExtractor, one process.
start=$(date +%s.%N)
"$VENV/bin/wikiextractor" --json --no-templates --processes 1 -q -o "$WORK/we" "$XML"
end=$(date +%s.%N)
WE_S=$(python3 -c "print($end - $start)")
WE_DOCS=$(cat "$WORK"/we/*/* | wc -l)

# ctrl: single-threaded and with all cores.
CTRL_OUT=$("$EXTRACT" "$XML" "$(nproc)" 2>/dev/null)
echo "$CTRL_OUT"
CTRL1_S=$(echo "$CTRL_OUT" | awk '/^threads=1 /{for(i=1;i<=NF;i++) if($i ~ /^seconds=/){sub("seconds=","",$i); print $i}}')
CTRLN_S=$(echo "$CTRL_OUT" | awk 'NR==2{for(i=1;i<=NF;i++) if($i ~ /^seconds=/){sub("seconds=","",$i); print $i}}')
CTRLN_S=${CTRLN_S:-$CTRL1_S}

python3 - <<PY
mb, pages, cores = $MB, $PAGES, $(nproc)
we, c1, cn = $WE_S, $CTRL1_S, $CTRLN_S
print(f"WikiExtractor (1 process):  {we:7.2f} s  {mb/we:7.2f} MB/s  {pages/we:8.1f} pages/s  ({$WE_DOCS} documents)")
print(f"ctrl (1 thread):            {c1:7.2f} s  {mb/c1:7.2f} MB/s  {pages/c1:8.1f} pages/s")
print(f"ctrl ({cores} threads):            {cn:7.2f} s  {mb/cn:7.2f} MB/s  {pages/cn:8.1f} pages/s")
print(f"ratio per core (ctrl 1 thread / WikiExtractor 1 process): {we/c1:.1f}x")
print(f"ratio whole machine (ctrl {cores} threads / WikiExtractor 1 process): {we/cn:.1f}x")
PY
