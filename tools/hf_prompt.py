#!/usr/bin/env python3
"""Token ids for a prompt to a model that `ctrl export hf` wrote, as ctrl itself makes them.

ctrl cleans every text before SentencePiece sees it (src/core/clean_text.h: NFKC except that the spacing
sound marks ゛ ゜ stay whole; control, format, private-use and unassigned characters removed; every other
space a plain one, runs of spaces collapsed, lines trimmed, blank lines collapsed), and starts every
sequence with its control code. The exported tokenizer.model does none of this (it was trained on text
already clean), so a prompt encoded with sentencepiece alone gets other ids than the model saw whenever
it holds full-width letters, half-width kana, an ideographic space, a tab, ... This file does both steps.

    python3 tools/hf_prompt.py EXPORT_DIR CODE "プロンプト"   # prints the ids, control code first
    python3 tools/hf_prompt.py --clean < text                # prints the text as ctrl cleans it

From Python: `ids = prompt_ids(EXPORT_DIR, "Wiki", text)`, then
`model.generate(torch.tensor([ids]), eos_token_id=config["eos_token_id"], ...)`.
Python's unicodedata may follow another Unicode version than the ICU ctrl was built with; characters
assigned between the two are the only ones that can differ.
"""
import json
import os
import sys
import unicodedata

_REMOVED = {"Cc", "Cf", "Co", "Cs", "Cn"}  # control, format, private use, surrogate, unassigned


def _tidy(text):
    out, line = [], []
    space = blank = False
    text = text.replace("\r\n", "\n")
    for ch in text + "\n":
        if ch in "\n\r\u2028\u2029":
            if line:
                if out:
                    out.append("\n\n" if blank else "\n")
                out.append("".join(line))
                line, blank = [], False
            elif out:
                blank = True
            space = False
        elif ch == "\t" or ch.isspace():
            space = bool(line)
        elif unicodedata.category(ch) not in _REMOVED and ch != "\ufffd":
            if space:
                line.append(" ")
            space = False
            line.append(ch)
    return "".join(out)


def clean_text(text):
    """The text as ctrl trains on it and as ctrl's own tokenizer sees a prompt."""
    nfkc = unicodedata.normalize("NFKC", _tidy(text))
    return _tidy(nfkc.replace(" \u3099", "\u309b").replace(" \u309a", "\u309c"))


def prompt_ids(export_dir, code, text):
    """The control code's id, then the cleaned text's SentencePiece ids (needs the sentencepiece package)."""
    import sentencepiece

    with open(os.path.join(export_dir, "config.json"), encoding="utf-8") as f:
        codes = json.load(f).get("control_codes", {})
    if code not in codes:
        raise SystemExit(f"{export_dir}/config.json: no control code {code!r}; it has {', '.join(codes) or 'none'}")
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(export_dir, "tokenizer.model"))
    return [codes[code]] + sp.encode(clean_text(text))


if __name__ == "__main__":
    if sys.argv[1:] == ["--clean"]:
        sys.stdout.write(clean_text(sys.stdin.buffer.read().decode("utf-8", errors="replace")))
    elif len(sys.argv) == 4:
        print(" ".join(str(i) for i in prompt_ids(*sys.argv[1:])))
    else:
        raise SystemExit(__doc__)
