#!/bin/bash
# Builds the fuzz targets with clang (libFuzzer + AddressSanitizer) and runs each for a fixed time on a seed
# corpus: the corpus readers on the real samples and the test data, checkpoint loading (metadata included)
# and shard + manifest loading on seeds the targets write themselves. Fails on the first crash, leak or hang.
#   scripts/fuzz.sh [seconds per target, default 20]
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_PER_TARGET=${1:-20}
BUILD=build-fuzz
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCTRL_BUILD_FUZZERS=ON -DCTRL_BUILD_TESTS=OFF >/dev/null
READER_TARGETS="fuzz_wikitext fuzz_wikipedia_xml fuzz_aozora fuzz_jsonl"
LOADER_TARGETS="fuzz_checkpoint fuzz_shards"  # write their own seeds
TARGETS="$READER_TARGETS $LOADER_TARGETS"
if ! make -C "$BUILD" -j"$(nproc)" $TARGETS > "$BUILD/make.log" 2>&1; then
  # Every target or none: a target left out quietly once hid a fuzz source that no longer compiled.
  echo "fuzz: the fuzz targets do not build with clang (see $BUILD/make.log):" >&2
  grep -m5 'error' "$BUILD/make.log" >&2 || true
  exit 1
fi

set +o pipefail  # head closes the pipe early on purpose
SEEDS="$BUILD/seeds"
DATA=../shared/data
rm -rf "$SEEDS"
mkdir -p "$SEEDS"/{fuzz_wikitext,fuzz_wikipedia_xml,fuzz_aozora,fuzz_jsonl,fuzz_checkpoint,fuzz_shards}
for t in $LOADER_TARGETS; do  # each writes its own seeds (a valid file of its format)
  CTRL_FUZZ_WRITE_SEED="$SEEDS/$t" "$BUILD/$t"
done
if [ -f "$DATA/jawiki-excerpt.xml.bz2" ]; then
  bzcat "$DATA/jawiki-excerpt.xml.bz2" | head -c 60000 > "$SEEDS/fuzz_wikipedia_xml/head.xml"
  bzcat "$DATA/jawiki-excerpt.xml.bz2" | head -c 6000 | bzip2 > "$SEEDS/fuzz_wikipedia_xml/head.xml.bz2"
  bzcat "$DATA/jawiki-excerpt.xml.bz2" | sed -n '/<text/,/<\/text>/p' | head -c 200000 | split -b 8000 - "$SEEDS/fuzz_wikitext/page_"
fi
if [ -f "$DATA/aozora-notation-examples.sjis.txt" ]; then
  split -b 6000 "$DATA/aozora-notation-examples.sjis.txt" "$SEEDS/fuzz_aozora/sjis_"
  iconv -f SHIFT_JISX0213 -t UTF-8 "$DATA/aozora-notation-examples.sjis.txt" | head -c 8000 > "$SEEDS/fuzz_aozora/utf8"
fi
cp tests/data/corpus/* "$SEEDS/fuzz_jsonl/"
printf '{{a|[[b|{{c}}]]}}\n{|\n|x\n|}\n<ref>r</ref>&amp;' > "$SEEDS/fuzz_wikitext/mini"
set -o pipefail

for t in $TARGETS; do
  echo "== $t (${SECONDS_PER_TARGET}s)"
  mkdir -p "$BUILD/corpus-$t"
  "$BUILD/$t" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -artifact_prefix="$BUILD/crash-$t-" -print_final_stats=0 "$BUILD/corpus-$t" "$SEEDS/$t" > "$BUILD/$t.log" 2>&1 || {
    echo "fuzz: $t FAILED (artifact: $BUILD/crash-$t-*)"; tail -n 40 "$BUILD/$t.log"; exit 1; }
  tail -n 1 "$BUILD/$t.log"
done
echo "fuzz: no crash in any target"
