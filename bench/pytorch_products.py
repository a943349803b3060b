#!/usr/bin/env python3
"""PyTorch's side of bench/step_products: the same ops of one training step,
shape by shape, on the same device, as PyTorch's eager mode runs them for
Hugging Face's CTRLLMHeadModel.

- a linear layer: forward F.linear(x, W, b); backward the three ops autograd
  runs for it (dx = dy·W, dW = dyᵀ·x, db = Σ dy), plus, in bf16 and fp16,
  the casts of dW and db to the fp32 parameters' gradients that autocast's
  weight casts add. Under autocast W and b are 16-bit copies, as here.
- attention: F.scaled_dot_product_attention(q, k, v, is_causal=True), the
  path transformers takes for CTRL; forward alone, then forward and backward
  through autograd.
- the output head and loss: logits = F.linear(h, W, b), cross-entropy in fp32
  (autocast's rule for it), forward alone, then with backward.

Each op runs twice untimed, then three rounds of about --seconds; the fastest
round counts, as in step_products. With --ctrl FILE (step_products --json
from the same preset, micro-batch and precision) it prints both side by side
with ctrl's speed-up on each op, and --markdown FILE writes that table.
--ctrl and --torch take comma-separated lists of such files from several
processes (bench/products_vs_pytorch.sh's ROUNDS; where a process's buffers
land moves an op by up to 15% on a 2-core VM): the table takes each op's
median over them, and --torch alone measures nothing.

.venv/bin/python bench/pytorch_products.py --preset base --precision bf16 [--device cuda] [--ctrl ctrl.json]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pytorch_train import PRESETS  # noqa: E402  (the presets' shapes, one table for both benches)


def time_per_call(fn, seconds, sync):
    fn()
    sync()
    start = time.perf_counter()
    fn()
    sync()
    once = time.perf_counter() - start
    calls = int(min(max(seconds / max(once, 1e-7), 1), 100000))
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        best = min(best, (time.perf_counter() - start) / calls)
    return best


def measure(preset, batch, precision, device, seconds):
    p = PRESETS[preset]
    D, F_, V, H, T = p["D"], p["F"], p["V"], p["H"], p["T"]
    N = batch * T
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    gen = torch.Generator(device="cpu").manual_seed(1)

    def rand(*shape, dt=dtype, grad=False):
        t = ((torch.rand(*shape, generator=gen) - 0.5) * 0.1).to(device=device, dtype=dt)
        return t.requires_grad_(grad)

    rows = []
    for name, dout, din in (("qkv", 3 * D, D), ("attention output", D, D), ("feed-forward in", F_, D),
                            ("feed-forward out", D, F_)):
        x, w, b, dy = rand(N, din), rand(dout, din), rand(dout), rand(N, dout)

        def forward():
            with torch.no_grad():
                F.linear(x, w, b)

        def backward():
            torch.mm(dy, w)
            dw, db = torch.mm(dy.t(), x), dy.sum(0)
            if dtype != torch.float32:
                dw.float(), db.float()

        f = time_per_call(forward, seconds, sync)
        rows.append(dict(op=name, shape=f"{N}x{dout}x{din}", forward_s=f,
                         total_s=f + time_per_call(backward, seconds, sync)))
        del x, w, b, dy

    q, k, v = (rand(batch, H, T, D // H, grad=True) for _ in range(3))
    grad = rand(batch, H, T, D // H)

    def attention_forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def attention_both():
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)

    rows.append(dict(op="attention", shape=f"{batch}x{H}x{T}x{T}x{D // H}",
                     forward_s=time_per_call(attention_forward, seconds, sync),
                     total_s=time_per_call(attention_both, seconds, sync)))
    del q, k, v, grad

    h, w, b = rand(N, D, grad=True), rand(V, D, grad=True), rand(V, grad=True)
    targets = torch.randint(0, V, (N,), generator=gen).to(device)

    def head_forward():
        with torch.no_grad():
            F.cross_entropy(F.linear(h, w, b).float(), targets)

    def head_both():
        F.cross_entropy(F.linear(h, w, b).float(), targets).backward()

    rows.append(dict(op="output head and loss", shape=f"{N}x{V}x{D}",
                     forward_s=time_per_call(head_forward, seconds, sync),
                     total_s=time_per_call(head_both, seconds, sync)))
    return rows


def medians(docs):
    """One row per op with the median of each time over the documents' rows."""
    rows = []
    for first in docs[0]["rows"]:
        same = [next(r for r in d["rows"] if r["op"] == first["op"]) for d in docs]
        rows.append(dict(first, forward_s=statistics.median(r["forward_s"] for r in same),
                         total_s=statistics.median(r["total_s"] for r in same)))
    return rows


def side_by_side(ctrl, torch_rows, title):
    by_op = {r["op"]: r for r in ctrl["rows"]}
    lines = [title, "",
             "| op | shape | ctrl forward ms | PyTorch forward ms | ctrl / PyTorch speed | "
             "ctrl +backward ms | PyTorch +backward ms | ctrl / PyTorch speed |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in torch_rows:
        c = by_op.get(r["op"])
        if c is None:
            continue
        lines.append(f"| {r['op']} | {r['shape']} | {c['forward_s'] * 1e3:.3f} | {r['forward_s'] * 1e3:.3f} | "
                     f"**{r['forward_s'] / c['forward_s']:.2f}×** | {c['total_s'] * 1e3:.3f} | "
                     f"{r['total_s'] * 1e3:.3f} | **{r['total_s'] / c['total_s']:.2f}×** |")
    total_c = sum(by_op[r["op"]]["total_s"] for r in torch_rows if r["op"] in by_op)
    total_t = sum(r["total_s"] for r in torch_rows if r["op"] in by_op)
    lines.append(f"| all six, once each | | | | | {total_c * 1e3:.3f} | {total_t * 1e3:.3f} | "
                 f"**{total_t / total_c:.2f}×** |")
    return "\n".join(lines) + "\n"


def load(path):
    with open(path) as f:
        return json.load(f)


def write(path, text):
    """Whole or not at all: a temporary name, then a rename."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--seconds", type=float, default=0.2)
    ap.add_argument("--ctrl", help="step_products --json output(s) of the same work, to print beside (a,b,...)")
    ap.add_argument("--torch", help="this program's --save output(s) to report instead of measuring (a,b,...)")
    ap.add_argument("--markdown", help="write the side-by-side table (needs --ctrl) to this file")
    ap.add_argument("--save", help="write the measurements as JSON to this file")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 products as fp32, as ctrl's default
    if a.torch:
        saved = [load(f) for f in a.torch.split(",")]
        rows, hardware, version = medians(saved), saved[0]["hardware"], saved[0]["torch"]
    else:
        rows = measure(a.preset, a.batch, a.precision, a.device, a.seconds)
        hardware = torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else \
            f"{torch.get_num_threads()} threads"
        version = torch.__version__
    doc = dict(program="pytorch_products", torch=version, preset=a.preset, precision=a.precision,
               device=a.device, hardware=hardware, micro_batch=a.batch, rows=rows)
    if a.save:
        write(a.save, json.dumps(doc, indent=1) + "\n")
    if a.ctrl:
        runs = [load(f) for f in a.ctrl.split(",")]
        for f, c in zip(a.ctrl.split(","), runs):
            if (c["preset"], c["precision"], c["micro_batch"]) != (a.preset, a.precision, a.batch):
                sys.exit(f"pytorch_products: {f} is {c['preset']} {c['precision']} micro-batch "
                         f"{c['micro_batch']}, not {a.preset} {a.precision} {a.batch}")
        ctrl = dict(runs[0], rows=medians(runs))
        count = f", medians of {len(runs)} processes each" if len(runs) > 1 else ""
        title = (f"{a.preset}, {a.precision}, {a.batch} x {PRESETS[a.preset]['T']} tokens, {a.device}: ctrl "
                 f"({ctrl['products']}, {ctrl['hardware']}) against PyTorch {version} ({hardware}){count}")
        table = side_by_side(ctrl, rows, title)
        print(table)
        if a.markdown:
            write(a.markdown, table)
    elif not a.save:
        for r in rows:
            print(f"{r['op']:22} {r['shape']:22} forward {r['forward_s'] * 1e3:9.3f} ms   "
                  f"+backward {r['total_s'] * 1e3:9.3f} ms")


if __name__ == "__main__":
    main()
