"""What the paper's verifier costs to export and to load, before and after exports kept the run's dtype and GPU
cells kept their models resident: a full-width random-weight model of Yarn-Llama-2-7B-128K's architecture on CPU.

    python bench/verifier_load.py                      # 2 and 6 of the 7B's 32 layers, 5 loads each
    python bench/verifier_load.py --layers 2 4 8 --loads 7 --cells 693 --cells-per-job 16

The 7B itself (13.5 GB in fp16, 27 GB in fp32) does not fit beside a test suite in this machine's 24 GB, so the
model keeps the 7B's config.json (hidden 4,096, MLP 11,008, 32 heads, vocabulary 32,000, YaRN x32) with fewer
layers; bytes and seconds are then extrapolated to 32 layers linearly through the smallest and largest depth
(the embeddings and LM head are the intercept, a decoder layer the slope; timings by their fastest load). The source stands for the hub snapshot
(fp16). Each load runs in a fresh process (no copy of the model in memory to reuse; the files are in the page
cache, as they are for every cell after the first), touches every page of every weight (safetensors maps the
file; a copy to the GPU reads it all) and reports its seconds and peak resident memory:

- before: ``export-model`` wrote float32 (the old default); a cell loaded that with ``dtype=float16`` (the CPU
  reads 4 bytes a weight and converts) and then moved it to the device, in every one of the grid's cells;
- after: ``export-model --dtype float16`` (the run's ``verifier_dtype``), loaded by ``budgetdraft.decoding.loading._load``
  (straight onto the device with ``device_map`` on an accelerator; here the CPU), once per resident process: the
  whole grid on one GPU, or one SLURM job group of ``--cells-per-job`` cells.

Then, on the small paper-shaped models of the test suite, the per-cell overhead of each way to run a cell (own
process, forking warm process, resident process) as the wall time of one ``eval-cell`` seen by its caller.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests")]
LOAD = """
import json, sys, time
import torch
from transformers import AutoModelForCausalLM
from transformers.models.llama import modeling_llama
from budgetdraft.decoding.loading import _load
torch.set_num_threads(1)
start = time.perf_counter()  # imports done: the seconds of reading the weights
if sys.argv[1] == "before":
    model = AutoModelForCausalLM.from_pretrained(sys.argv[2], dtype=torch.float16).to("cpu").eval()
else:
    model = _load(sys.argv[2], "cpu", "float16")
# safetensors maps the file: touch one element per 4 KiB page of every weight, so that the weights are read (as a
# copy to the GPU reads them) and not left for the first forward pass to fault in
for p in model.parameters():
    p.detach().reshape(-1)[:: 4096 // p.element_size()].sum()
seconds = time.perf_counter() - start
# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork + exec
hwm = next(line for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"s": seconds, "rss_gb": int(hwm.split()[1]) / 2**20}))
"""


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.iterdir() if f.name.endswith(".safetensors"))


def source_model(layers: int, out: Path) -> Path:
    """The 7B's config with ``layers`` layers, random fp16 weights: what the hub snapshot holds (no tokenizer
    export: the bench times weights only)."""
    import torch
    from paper_models import YARN_LLAMA_2_7B_128K
    from transformers import AutoModelForCausalLM, LlamaConfig

    cfg = {k: v for k, v in YARN_LLAMA_2_7B_128K.items() if k != "auto_map"}
    config = LlamaConfig(**{**cfg, "num_hidden_layers": layers})
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float16)
    model.save_pretrained(out, safe_serialization=True)
    return out


def export(src: Path, out: Path, dtype: str) -> tuple[int, float]:
    """``models.export``'s weights step (the tokenizer copy left out): bytes written and seconds."""
    import torch
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(src, dtype=getattr(torch, dtype), trust_remote_code=False)
    model.save_pretrained(out, safe_serialization=True)
    return dir_bytes(out), time.perf_counter() - start


def loads(kind: str, path: Path, n: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_DEACTIVATE_ASYNC_LOAD": "1"}
    out = []
    for _ in range(n):
        run = subprocess.run([sys.executable, "-c", LOAD, kind, str(path)], capture_output=True, text=True, env=env)
        if run.returncode:
            raise RuntimeError(run.stderr[-2000:])
        out.append(json.loads(run.stdout.strip().splitlines()[-1]))
    return out


def measure_depth(layers: int, n: int, work: Path) -> dict:
    """Both exports of one depth, then their loads alternated (before, after, before, ...) so that a machine
    busy with other work slows both alike."""
    src = source_model(layers, work / f"src{layers}")
    row, kinds = {"layers": layers}, (("before", "float32"), ("after", "float16"))
    for kind, dtype in kinds:
        row[f"{kind}_bytes"], row[f"{kind}_export_s"] = export(src, work / f"{kind}{layers}", dtype)
    runs = {kind: [] for kind, _ in kinds}
    for _ in range(n):
        for kind, _ in kinds:
            runs[kind] += loads(kind, work / f"{kind}{layers}", 1)
    for kind, _ in kinds:
        row[f"{kind}_load_s"] = [r["s"] for r in runs[kind]]
        row[f"{kind}_rss_gb"] = max(r["rss_gb"] for r in runs[kind])
    shutil.rmtree(src)
    return row


def at_32(rows: list[dict], key: str) -> float:
    """``key`` extrapolated to the 7B's 32 layers through the smallest and the largest depth (for timings, the
    fastest load of each: what reading the weights costs when nothing else on the machine gets in the way)."""
    a, b = sorted(rows, key=lambda r: r["layers"])[:: len(rows) - 1]
    va, vb = (min(r[key]) if isinstance(r[key], list) else r[key] for r in (a, b))
    return va + (vb - va) / (b["layers"] - a["layers"]) * (32 - a["layers"])


def cell_overhead(n: int, work: Path) -> dict[str, list[float]]:
    """Wall seconds of one tiny paper-shaped ``eval-cell`` as its caller sees it, run cold, forked from the warm
    process, and by the resident process (which loaded its models in an earlier cell)."""
    from conftest import tiny_cell_args, tiny_cell_inputs

    tiny_cell_inputs(work, list(range(64)))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = {}
    for mode in ("cold", "fork", "resident"):
        sock = work / f"{mode}.sock"
        server = None
        if mode != "cold":
            flags = ["--resident"] if mode == "resident" else []
            cmd = [sys.executable, "-m", "budgetdraft", "warm", "--socket", str(sock), *flags]
            server = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            while not sock.exists():
                time.sleep(0.1)
        run_env = {**env, "BUDGETDRAFT_WARM": str(sock)} if server else env
        times = []
        for i in range(n + 1):  # the first is discarded: it loads what the warm / resident process keeps
            argv = tiny_cell_args(work, work / f"{mode}{i}.parquet", new_tokens=4)
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "budgetdraft", "eval-cell", *argv], env=run_env, check=True,
                           capture_output=True)  # fmt: skip
            times.append(time.perf_counter() - start)
        out[mode] = times[1:]
        if server:
            server.terminate()
            server.wait()
    return out


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s ({min(values):.2f}-{max(values):.2f}, n = {len(values)})"


def report(rows: list[dict], cells: dict[str, list[float]], args) -> str:
    gb = 1e9
    lines = [
        "| layers | export fp32 (before) | export fp16 (after) | load before | load after | peak RSS before / after |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['layers']} | {r['before_bytes'] / gb:.2f} GB | {r['after_bytes'] / gb:.2f} GB | "
            f"{spread(r['before_load_s'])} | {spread(r['after_load_s'])} | "
            f"{r['before_rss_gb']:.1f} / {r['after_rss_gb']:.1f} GB |"
        )
    before_s, after_s = at_32(rows, "before_load_s"), at_32(rows, "after_load_s")
    per_job = math.ceil(args.cells / args.cells_per_job)
    lines += [
        "",
        f"At 32 layers (extrapolated): export {at_32(rows, 'before_bytes') / gb:.1f} GB before, "
        f"{at_32(rows, 'after_bytes') / gb:.1f} GB after; a load {before_s:.1f} s before, {after_s:.1f} s after.",
        f"Verifier loads per grid of {args.cells} cells: before {args.cells} (one per cell) = "
        f"{args.cells * before_s / 3600:.2f} h; after 1 on one GPU (resident) = {after_s:.1f} s, or "
        f"{per_job} in SLURM job groups of {args.cells_per_job} = {per_job * after_s / 60:.1f} min.",
        "",
        "Per-cell overhead, one tiny paper-shaped cell (4 new tokens) as its caller sees it: "
        + "; ".join(f"{mode} {spread(t)}" for mode, t in cells.items()),
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, nargs="+", default=[2, 6], help="depths measured (>= 2 of them)")
    parser.add_argument("--loads", type=int, default=5, help="timed loads of each export")
    parser.add_argument("--cells", type=int, default=693, help="grid cells (config/paper.yaml's grid: 693)")
    parser.add_argument("--cells-per-job", type=int, default=16, help="cells of one SLURM job group")
    parser.add_argument("--cell-runs", type=int, default=5, help="timed tiny cells per way of running them")
    args = parser.parse_args()
    if len(set(args.layers)) < 2:
        parser.error("--layers needs two depths at least (the slope per layer)")
    import torch

    torch.set_num_threads(1)
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs; page cache warm (each file was just written)")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        rows = [measure_depth(layers, args.loads, Path(tmp)) for layers in sorted(set(args.layers))]
        cells = cell_overhead(args.cell_runs, Path(tmp) / "cells")
    print(report(rows, cells, args))


if __name__ == "__main__":
    main()
