#!/usr/bin/env python3
"""bench/step_products (the binary given as the first argument) runs each op
of its table on the CPU backend in fp32 and bf16, with the shapes of the
config it was given and a positive time for each; a bad argument is a
one-line error and exit status 1. It checks the tool, not its speed."""
import json
import subprocess
import sys

binary = sys.argv[1]
expected = {"qkv": "4x96x32", "attention output": "4x32x32", "feed-forward in": "4x64x32",
            "feed-forward out": "4x32x64", "attention": "2x2x2x2x16", "output head and loss": "4x50x32"}
shape = ["--set", "model.vocab_size=50", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.n_ctx=2", "--set", "train.micro_batch=2",
         "--set", "train.global_batch=2", "--seconds", "0.002", "--threads", "1", "--json"]
for precision in ("fp32", "bf16"):
    run = subprocess.run([binary, "--config", "tiny", "--set", f"train.precision={precision}", *shape],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, f"{precision}: exit {run.returncode}: {run.stderr}"
    doc = json.loads(run.stdout)
    assert doc["precision"] == precision and doc["micro_batch"] == 2, doc
    rows = {r["op"]: r for r in doc["rows"]}
    assert {op: r["shape"] for op, r in rows.items()} == expected, rows
    for op, r in rows.items():
        assert 0 < r["forward_s"] < r["total_s"] < 1, (precision, op, r)
        assert r["total_flops"] == 3 * r["forward_flops"] > 0, (precision, op, r)

for bad, says in ((["--config", "tiny", "--seconds", "0"], "step_products: --seconds 0: expected a number in [0.001, 60]"),
                  (["--config", "tiny", "--frobnicate"], "step_products: unknown flag --frobnicate"),
                  (["--seconds", "1"], "step_products: missing --config"),
                  (["--config", "no-such-preset"], "no-such-preset")):
    run = subprocess.run([binary, *bad], capture_output=True, text=True, timeout=60)
    assert run.returncode == 1 and says in run.stderr, (bad, run.returncode, run.stderr)
print("step_products_output: ok")
