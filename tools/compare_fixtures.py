#!/usr/bin/env python3
"""Compares two oracle fixtures (tools/make_fixture.py) tensor by tensor: a
fixture regenerated with today's PyTorch and transformers against the committed
one. Each tensor must agree within the tolerance that the C++ tests allow for
its kind, by the rules of tests/test_model_fixture.cpp: relative to the
tensor's largest magnitude with a floor of 1e-3 (the key bias's gradient is
zero in exact arithmetic, so both files hold only rounding noise there), and
the key bias left out of AdamW's final weights (Adam turns that noise into
lr-sized steps). Prints one line per kind with the worst difference; exit 1 if any
tensor is missing, has another shape, or differs beyond its tolerance.
  .venv/bin/python tools/compare_fixtures.py COMMITTED.safetensors REGENERATED.safetensors
"""
import sys

import torch
from safetensors.torch import load_file

# Tolerances relative to max(max|reference|, FLOOR), by tensor-name prefix (first match wins).
FLOOR = 1e-3
TOLERANCES = [
    ("logits", 1e-5), ("loss", 1e-5), ("grad.", 1e-4),
    ("adamw.final.", 1e-3), ("adamw.", 2e-4), ("adagrad.", 1e-4), ("", 1e-6),
]


def tolerance(name):
    return next(t for prefix, t in TOLERANCES if name.startswith(prefix))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ref, new = load_file(sys.argv[1]), load_file(sys.argv[2])
    bad = [f"missing in {sys.argv[2]}: {n}" for n in ref if n not in new]
    bad += [f"not in {sys.argv[1]}: {n}" for n in new if n not in ref]
    worst = {}
    for name in sorted(set(ref) & set(new)):
        a, b = ref[name], new[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            bad.append(f"{name}: {tuple(a.shape)} {a.dtype} vs {tuple(b.shape)} {b.dtype}")
            continue
        if not a.is_floating_point():
            if not torch.equal(a, b):
                bad.append(f"{name}: integer tensor differs")
            continue
        if name.startswith("adamw.final.") and "Wk.bias" in name:
            continue
        scale = max(a.double().abs().max().item(), FLOOR)
        diff = (a.double() - b.double()).abs().max().item() / scale if a.numel() else 0.0
        kind = name.split(".")[0]
        worst[kind] = max(worst.get(kind, 0.0), diff)
        if diff > tolerance(name):
            bad.append(f"{name}: differs by {diff:.2e} of scale (tolerance {tolerance(name):.0e})")
    for kind, diff in sorted(worst.items()):
        print(f"  {kind:<12} worst {diff:.2e} of scale")
    for line in bad:
        print(f"{sys.argv[2]}: {line}")
    print(f"{sys.argv[2]}: {'differs' if bad else 'agrees'} ({len(set(ref) & set(new))} tensors)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
