#!/bin/sh
# Encoding throughput: ctrl's parallel encoder vs SentencePiece's own spm_encode
# (Debian package `sentencepiece`), same model, same text, one run.
#   bench/encode_vs_spm.sh [BUILD_DIR] [CORPUS_DIR] [THREADS]
# CORPUS_DIR is a `ctrl prepare` output (default: the built-in corpus, prepared
# into /tmp/ctrl-bench-corpus if missing). Its train text, decoded, each
# document's lines as lines (as ctrl encodes a document: line by line), is
# encoded by both, line by line: spm_encode each line whole, ctrl each line
# with Tokenizer::encode_batch (a line over 64 KiB in pieces cut at sentence ends).
# The ids of every line must be identical: on a difference the script prints
# the first differing line's number and exits 1.
set -eu
BUILD=${1:-build}
CORPUS=${2:-/tmp/ctrl-bench-corpus}
THREADS=${3:-$(nproc)}
command -v spm_encode >/dev/null || { echo "spm_encode missing: apt-get install sentencepiece" >&2; exit 1; }
[ -x "$BUILD/encode_throughput" ] || { echo "$BUILD/encode_throughput missing: make encode_throughput" >&2; exit 1; }
[ -f "$CORPUS/manifest.json" ] || "$BUILD/ctrl" prepare --out "$CORPUS" >&2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$BUILD/encode_throughput" dump "$CORPUS" > "$WORK/text.txt"
MODEL="$CORPUS/tokenizer.model"
BYTES=$(wc -c < "$WORK/text.txt")
LINES=$(wc -l < "$WORK/text.txt")
now() { date +%s.%N; }
t0=$(now); spm_encode --model "$MODEL" --output_format=id < "$WORK/text.txt" > "$WORK/spm.ids"; t1=$(now)
"$BUILD/encode_throughput" encode "$MODEL" "$WORK/text.txt" "$THREADS" > "$WORK/ctrl.ids" 2> "$WORK/ctrl.encode_s"; t2=$(now)
cmp -s "$WORK/spm.ids" "$WORK/ctrl.ids" && SAME=identical || SAME=DIFFERENT
awk -v b="$BYTES" -v l="$LINES" -v s0="$t0" -v s1="$t1" -v s2="$t2" -v enc="$(cat "$WORK/ctrl.encode_s")" \
    -v th="$THREADS" -v same="$SAME" 'BEGIN {
  spm = s1 - s0; ctrl = s2 - s1; mb = b / 1e6;
  printf "text: %.1f MB, %d lines\n", mb, l;
  printf "spm_encode (1 thread, end to end):    %6.2f s  %6.2f MB/s\n", spm, mb / spm;
  printf "ctrl encode (%d threads, end to end): %6.2f s  %6.2f MB/s (encoding alone %.2f s, %.2f MB/s)\n", th, ctrl, mb / ctrl, enc, mb / enc;
  printf "ratio ctrl/spm_encode: %.2fx end to end; ids %s\n", spm / ctrl, same;
}'
if [ "$SAME" != identical ]; then
  # The first line whose ids differ (or that one side lacks), and how many lines differ.
  DIFF=$(awk -v other="$WORK/ctrl.ids" '{
    if ((getline o < other) <= 0) o = "(missing)"
    if (o != $0) { if (!first) first = NR; n++ }
  } END {
    while ((getline o < other) > 0) { if (!first) first = NR + 1; n++ }
    if (first) printf "%d %d", first, n
  }' "$WORK/spm.ids")
  [ -n "$DIFF" ] || { echo "ids DIFFERENT: the id files differ only in their line ends" >&2; exit 1; }
  first=${DIFF% *}
  echo "ids DIFFERENT: first differing line $first ($(sed -n "${first}p" "$WORK/text.txt" | wc -c) bytes of text;" \
    "${DIFF#* } of $LINES lines differ)" >&2
  exit 1
fi
