#!/usr/bin/env python3
"""Checks a Hugging Face model directory (config.json + model.safetensors, as
`ctrl export hf` writes it) against reference logits: loads it with
transformers' CTRLLMHeadModel.from_pretrained, runs the `input_ids` of the
reference file and compares with its `logits`. Prints the max abs difference;
exits 1 if it exceeds --tol (default 1e-4, fp32), 2 if the files are unusable.

Runs in the virtual environment that tools/setup_python.sh creates (.venv:
current torch and transformers from PyPI; Debian's python3-torch is not used).
Usage: .venv/bin/python tools/check_export.py DIR REFERENCE.safetensors
See docs/training.md ("Checking an export against transformers").
"""
import argparse
import sys

import torch
from safetensors.torch import load_file
from transformers import CTRLLMHeadModel, logging as hf_logging


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("reference", help="safetensors file with input_ids [B,T] (I64) and logits [B,T,V]")
    p.add_argument("--tol", type=float, default=1e-4)
    args = p.parse_args()
    hf_logging.set_verbosity_error()  # our own one-line verdicts only

    ref = load_file(args.reference)
    for key in ("input_ids", "logits"):
        if key not in ref:
            print(f"{args.reference}: missing tensor '{key}'", file=sys.stderr)
            return 2
    ids, want = ref["input_ids"].long(), ref["logits"].float()
    try:
        # Missing or unexpected weights must be an error, not a silent random init.
        model, info = CTRLLMHeadModel.from_pretrained(args.model_dir, output_loading_info=True,
                                                      torch_dtype=torch.float32)
    except (OSError, ValueError) as e:
        print(f"{args.model_dir}: cannot load as CTRLLMHeadModel: {e}", file=sys.stderr)
        return 2
    info["missing_keys"] = [k for k in info["missing_keys"] if k != "lm_head.weight"]  # tied, not stored
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"{args.model_dir}: weights do not match the model: {problems}", file=sys.stderr)
        return 2
    model.eval()
    with torch.no_grad():
        got = model(ids).logits.float()
    if got.shape != want.shape:
        print(f"logits shape {tuple(got.shape)} != reference {tuple(want.shape)}", file=sys.stderr)
        return 1
    diff = (got - want).abs().max().item()
    print(f"max abs diff {diff:.3e} (tol {args.tol:g}) over {want.numel()} logits")
    return 0 if diff <= args.tol else 1


if __name__ == "__main__":
    sys.exit(main())
