#!/usr/bin/env python3
"""Writes an oracle fixture for ctrl's tests: one safetensors file holding a
freshly initialised Hugging Face CTRLLMHeadModel (weights under their HF
state-dict names), a random batch, the logits, loss and every parameter
gradient, and short AdamW and Adagrad (TensorFlow semantics) trajectories.

Run in the virtual environment that tools/setup_python.sh creates (.venv:
current torch and transformers from PyPI; Debian's python3-torch is not used):
    bash tools/setup_python.sh
    .venv/bin/python tools/make_fixture.py --seed 1234 --out FILE.safetensors ...
See docs/testing.md ("The PyTorch / Hugging Face oracle") for the meaning of every tensor.
"""
import argparse
import copy
import json
import os
import sys
import tempfile

import torch
import transformers
from safetensors.torch import save_file
from transformers import CTRLConfig, CTRLLMHeadModel


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", required=True, help="output .safetensors file")
    p.add_argument("--vocab", type=int, default=96)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--dff", type=int, default=64)
    p.add_argument("--n-positions", type=int, default=32)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--lr", type=float, default=1e-2, help="AdamW learning rate (constant)")
    p.add_argument("--lr-adagrad", type=float, default=0.05, help="Adagrad learning rate (constant; CTRL used 0.05)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--clip-adagrad", type=float, default=0.25)
    p.add_argument("--perturb-std", type=float, default=0.1,
                   help="std of the normal noise added to every bias and LayerNorm parameter")
    p.add_argument("--hf-dir", help="also save_pretrained() the initial model into this directory")
    p.add_argument("--hf-logits", help="also write input_ids and logits alone into this .safetensors file")
    return p.parse_args()


def make_model(args):
    """HF's own init under the seed, then every bias and LayerNorm parameter
    moved by N(0, perturb_std) so that a test notices a dropped or misplaced
    bias or LayerNorm (HF inits them to exactly 0 and 1)."""
    config = CTRLConfig(vocab_size=args.vocab, n_positions=args.n_positions, n_embd=args.d_model,
                        dff=args.dff, n_layer=args.layers, n_head=args.heads, layer_norm_epsilon=1e-6,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, initializer_range=0.02)
    torch.manual_seed(args.seed)
    model = CTRLLMHeadModel(config).float()
    model.eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # all biases and LayerNorm weights/biases
                p.add_(torch.randn_like(p) * args.perturb_std)
    assert model.lm_head.weight is model.transformer.w.weight, "lm_head must be tied to the embedding"
    return config, model


def param_names(model):
    # named_parameters() lists a tied parameter once, under transformer.w.weight.
    return [n for n, _ in model.named_parameters()]


def snapshot(model):
    return {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}


def restore(model, state):
    with torch.no_grad():
        for n, p in model.named_parameters():
            p.copy_(state[n])


def loss_of(model, ids):
    return model(ids, labels=ids).loss


def adamw_groups(model, weight_decay):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def run_adamw(model, init, ids, args, clip):
    """`steps` AdamW steps from `init` on the same batch; returns (losses before
    each step, pre-clip global grad norms, final parameters)."""
    restore(model, init)
    opt = torch.optim.AdamW(adamw_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95),
                            eps=1e-8)
    b1, b2, eps = 0.9, 0.95, 1e-8
    m = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    v = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
    losses, norms = [], []
    for step in range(1, args.steps + 1):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, ids)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=clip)))
        expected = {}
        for n, p in model.named_parameters():  # the documented update, written out
            wd = args.weight_decay if p.dim() >= 2 else 0.0
            m[n] = b1 * m[n] + (1 - b1) * p.grad
            v[n] = b2 * v[n] + (1 - b2) * p.grad * p.grad
            denom = (v[n] / (1 - b2 ** step)).sqrt() + eps
            expected[n] = p.detach() * (1 - args.lr * wd) - args.lr * (m[n] / (1 - b1 ** step)) / denom
        opt.step()
        losses.append(float(loss))
        for n, p in model.named_parameters():
            diff = (p.detach() - expected[n]).abs().max().item()
            if diff > 1e-6:
                sys.exit(f"make_fixture: torch AdamW differs from the written-out update on {n} by {diff}")
    return losses, norms, snapshot(model)


def run_adagrad(model, init, ids, args):
    """Adagrad with TensorFlow semantics (accumulator starts at 0.1, no epsilon),
    global-norm clipping; checked against a hand-written update each step."""
    restore(model, init)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr_adagrad, initial_accumulator_value=0.1, eps=0.0)
    acc = {n: torch.full_like(p, 0.1) for n, p in model.named_parameters()}
    losses, norms = [], []
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(model, ids)
        loss.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=args.clip_adagrad)))
        expected = {}
        for n, p in model.named_parameters():
            acc[n] += p.grad * p.grad
            expected[n] = p.detach() - args.lr_adagrad * p.grad / acc[n].sqrt()
        opt.step()
        losses.append(float(loss))
        for n, p in model.named_parameters():
            diff = (p.detach() - expected[n]).abs().max().item()
            if diff > 1e-6:
                sys.exit(f"make_fixture: torch Adagrad differs from the TF-semantics update on {n} by {diff}")
    return losses, norms, snapshot(model)


def choose_clip(model, init, ids, args):
    """A clip threshold that clips on some AdamW steps but not all: a midpoint
    between pre-clip norms of an unclipped run, nearest the median first, the
    first for which the clipped run really has both kinds of step."""
    _, free_norms, _ = run_adamw(model, init, ids, args, clip=float("inf"))
    ordered = sorted(free_norms)
    mids = [(a + b) / 2 for a, b in zip(ordered, ordered[1:])]  # never exactly a norm: no borderline step
    candidates = sorted(mids, key=lambda m: abs(m - ordered[len(ordered) // 2]))
    for clip in candidates:
        _, norms, _ = run_adamw(model, init, ids, args, clip)
        clipped = sum(n > clip for n in norms)
        if 0 < clipped < len(norms):
            return clip
    sys.exit(f"make_fixture: no clip threshold clips some but not all AdamW steps (norms {free_norms}); "
             "try other --steps or --lr")


def write_atomically(tensors, metadata, path):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=".safetensors")
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def oracle(model, init, ids, args, clip):
    """Everything the fixture records for one model: logits, loss, gradients,
    the AdamW and Adagrad trajectories. Works in the model's dtype."""
    names = param_names(model)
    restore(model, init)
    model.zero_grad(set_to_none=True)
    out = model(ids, labels=ids)
    out.loss.backward()
    t = {"logits": out.logits.detach().contiguous(), "loss": out.loss.detach().reshape(1)}
    for n, p in model.named_parameters():
        t["grad." + n] = p.grad.detach().clone().contiguous()
    for opt, (losses, norms, final) in (("adamw", run_adamw(model, init, ids, args, clip)),
                                        ("adagrad", run_adagrad(model, init, ids, args))):
        t[opt + ".losses"] = torch.tensor(losses, dtype=out.loss.dtype)
        t[opt + ".grad_norms"] = torch.tensor(norms, dtype=out.loss.dtype)
        for n in names:
            t[opt + ".final." + n] = final[n]
    return t


def fp64_deviation(t32, t64):
    """Max abs difference between the fp32 results and the same computation in
    fp64, per kind of tensor: how far a correct fp32 implementation may drift,
    the yardstick for the tolerances tests use."""
    groups = {}
    for k, v in t32.items():
        group = next((g for g in ("grad.", "adamw.final.", "adagrad.final.") if k.startswith(g)), k)
        d = (v.double() - t64[k]).abs().max().item()
        groups[group.rstrip(".")] = max(groups.get(group.rstrip("."), 0.0), d)
    return {k: float(f"{v:.3g}") for k, v in groups.items()}


def main():
    args = parse_args()
    if args.seq > args.n_positions:
        sys.exit(f"make_fixture: --seq {args.seq} exceeds --n-positions {args.n_positions}")
    torch.use_deterministic_algorithms(True)
    config, model = make_model(args)
    init = snapshot(model)
    names = param_names(model)

    gen = torch.Generator().manual_seed(args.seed + 1)
    ids = torch.randint(0, args.vocab, (args.batch, args.seq), generator=gen, dtype=torch.int64)

    if args.hf_dir:
        model.save_pretrained(args.hf_dir, safe_serialization=True)
    clip = choose_clip(model, init, ids, args)
    results = oracle(model, init, ids, args, clip)
    model64 = copy.deepcopy(model).double()
    results64 = oracle(model64, {n: v.double() for n, v in init.items()}, ids, args, clip)
    deviation = fp64_deviation(results, results64)
    if args.hf_logits:
        write_atomically({"input_ids": ids.contiguous(), "logits": results["logits"]},
                         {"source": "tools/make_fixture.py"}, args.hf_logits)

    tensors = {n: init[n] for n in names}
    tensors["input_ids"] = ids.contiguous()
    tensors["labels"] = ids.clone().contiguous()
    tensors.update(results)
    norms = results["adamw.grad_norms"].tolist()

    keys = ["vocab_size", "n_positions", "n_embd", "dff", "n_layer", "n_head", "layer_norm_epsilon",
            "resid_pdrop", "embd_pdrop", "attn_pdrop", "initializer_range"]
    cfg = config.to_dict()
    metadata = {
        "config": json.dumps({k: cfg[k] for k in keys}),
        "seed": str(args.seed),
        "steps": str(args.steps),
        "batch": str(args.batch),
        "seq": str(args.seq),
        "perturb_std": repr(args.perturb_std),
        "lr_adamw": repr(args.lr),
        "lr_adagrad": repr(args.lr_adagrad),
        "weight_decay": repr(args.weight_decay),
        "betas": json.dumps([0.9, 0.95]),
        "eps": repr(1e-8),
        "adagrad_initial_accumulator": repr(0.1),
        "clip_norm": repr(clip),
        "clip_norm_adagrad": repr(args.clip_adagrad),
        "fp64_max_abs_diff": json.dumps(deviation),
        "transformers_version": transformers.__version__,
        "torch_version": torch.__version__,
    }
    write_atomically(tensors, metadata, args.out)
    print(f"{args.out}: loss {results['loss'].item():.6f}, AdamW clip {clip:.6g} "
          f"(clipped {sum(n > clip for n in norms)}/{len(norms)} steps), "
          f"AdamW losses {[round(x, 5) for x in results['adamw.losses'].tolist()]}, "
          f"Adagrad losses {[round(x, 5) for x in results['adagrad.losses'].tolist()]}\n"
          f"  fp32 vs fp64 max abs diff: {deviation}")


if __name__ == "__main__":
    main()
