#!/usr/bin/env python3
"""PyTorch's side of the training benchmark: trains Hugging Face
CTRLLMHeadModel on synthetic random tokens and reports tokens/s, it/s and
peak RSS, with the torch version, BLAS and threads it ran with.

A step is the full training step ctrl also does: zero_grad, forward with
labels, backward, global-norm clip 1.0, AdamW(0.9, 0.95) step at lr 1e-4,
dropout 0. Timing starts after --warmup-steps; tokens/s = B*T*steps / time.
With --compile the model is torch.compile'd (inductor; its compilation
happens in the warm-up steps, reported as warmup_seconds, not in tokens/s).
With --device cuda the tokens are drawn on the GPU, AdamW is the fused CUDA
kernel, and peak_device_bytes is torch.cuda.max_memory_allocated; bf16 and
fp16 are autocast around the forward, fp16 with a GradScaler (dynamic loss
scaling, as apex's O1 did for the original CTRL), and fp32 leaves TF32 off
(PyTorch's default for matrix products).

Run in the PyPI environment (bash tools/setup_python.sh): .venv/bin/python bench/pytorch_train.py --preset small
"""
import argparse
import ctypes
import json
import os
import resource
import sys
import time

import torch
import transformers
from transformers import CTRLConfig, CTRLLMHeadModel

# Shapes: V vocab, L layers, D width, H heads, F feed-forward width, T context.
PRESETS = {
    "tiny": dict(V=8000, L=4, D=256, H=4, F=1024, T=128),
    "small": dict(V=32000, L=6, D=384, H=6, F=1536, T=256),
    "base": dict(V=32000, L=12, D=768, H=12, F=3072, T=256),
    "medium": dict(V=32000, L=24, D=1024, H=16, F=4096, T=256),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed steps first")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave torch's default)")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32",
                   help="bf16/fp16 = torch.autocast(device, dtype) around the forward; fp16 adds a GradScaler")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    p.add_argument("--compile", action="store_true", help="torch.compile the model (default inductor backend)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return p.parse_args()


def blas_summary():
    """Short form of torch.__config__.show(): BLAS_INFO, CPU capability, oneDNN,
    plus the OpenBLAS core actually chosen at run time (OPENBLAS_CORETYPE
    decides between e.g. Haswell/AVX2 and SkylakeX/AVX-512 kernels)."""
    show = torch.__config__.show()
    parts = []
    try:
        blas = ctypes.CDLL("libblas.so.3")  # the copy torch already loaded
        blas.openblas_get_corename.restype = ctypes.c_char_p
        blas.openblas_get_config.restype = ctypes.c_char_p
        parts.append(f"OpenBLAS {blas.openblas_get_corename().decode()} x{blas.openblas_get_num_threads()}")
        parts.append(blas.openblas_get_config().decode())
    except (OSError, AttributeError):
        parts.append("libblas.so.3 is not OpenBLAS")
    for line in show.splitlines():
        line = line.strip(" -")
        if line.startswith("CPU capability usage") or line.startswith("Intel(R) MKL-DNN"):
            parts.append(line)
    for item in show.replace("\n", " ").split(","):
        if "BLAS_INFO" in item:
            parts.append(item.split(":")[-1].strip())
    return "; ".join(parts)


def build(preset, seed, device):
    s = PRESETS[preset]
    torch.manual_seed(seed)
    config = CTRLConfig(vocab_size=s["V"], n_positions=s["T"], n_embd=s["D"], dff=s["F"], n_layer=s["L"],
                        n_head=s["H"], resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = CTRLLMHeadModel(config).to(device)
    model.train()
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-4, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    return model, opt, s


def main():
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    if cuda and not torch.cuda.is_available():
        sys.exit(f"pytorch_train: --device {args.device}: this PyTorch sees no CUDA device")
    model, opt, s = build(args.preset, args.seed, device)
    if args.compile:
        model = torch.compile(model)
    gen = torch.Generator(device=device).manual_seed(args.seed + 1)
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    scaler = torch.amp.GradScaler(device.type, enabled=args.precision == "fp16")

    def step():
        ids = torch.randint(0, s["V"], (args.batch, s["T"]), generator=gen, device=device)
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=low or torch.float32, enabled=low is not None):
            loss = model(ids, labels=ids).loss
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        scaler.step(opt)
        scaler.update()
        return float(loss.detach())  # waits for the step on a GPU

    warmup_steps = max(args.warmup_steps, 1 if args.compile else 0)  # a compiled model compiles in its first step
    warmup_start = time.perf_counter()
    for _ in range(warmup_steps):
        step()
    warmup_seconds = time.perf_counter() - warmup_start
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    loss = float("nan")
    for i in range(args.steps):
        loss = step()
        elapsed = time.perf_counter() - start
        rate = (i + 1) / elapsed
        print(f"\rstep {i + 1}/{args.steps}  {rate * args.batch * s['T']:.0f} tokens/s  "
              f"ETA {(args.steps - i - 1) / rate:.0f} s  loss {loss:.4f}", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    seconds = time.perf_counter() - start
    result = {
        "tool": "pytorch",
        "preset": args.preset,
        "precision": args.precision,
        "compiled": args.compile,
        "warmup_seconds": warmup_seconds,
        "batch": args.batch,
        "seq": s["T"],
        "steps": args.steps,
        "warmup_steps": warmup_steps,
        "seconds": seconds,
        "tokens_per_s": args.batch * s["T"] * args.steps / seconds,
        "it_per_s": args.steps / seconds,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "peak_device_bytes": torch.cuda.max_memory_allocated(device) if cuda else 0,
        "device": torch.cuda.get_device_name(device) if cuda else "cpu",
        "final_loss": loss,
        "threads": torch.get_num_threads(),
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "blas": "cuBLAS" if cuda else blas_summary(),
        "env": {k: os.environ.get(k, "") for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "LD_PRELOAD",
                                                   "OMP_NUM_THREADS", "OMP_WAIT_POLICY")},
    }
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:>20}: {v:.1f}" if isinstance(v, float) else f"{k:>20}: {v}")


if __name__ == "__main__":
    main()
