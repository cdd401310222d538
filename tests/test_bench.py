"""Every script of bench/ runs once (issue 55): bench/decode_speed.py had failed at its first import for weeks, and
nothing ran it. Each runs as a user runs it, ``python bench/X.py``, at the smallest sizes that still take its whole
code path once (tiny random models of tests/conftest.py, a few tokens, one repeat, one thread), and must exit 0 and
print the table or JSON it promises: a broken import, a renamed function or a changed return type fails here. The
numbers themselves mean nothing.

A fresh process pays ~7 s importing torch and transformers on a 2-core machine, so the runs that decode run in this
process (``run_script``: runpy runs the file as ``__main__``, with the sys.argv, sys.path and working directory that
command gives it, and the torch settings it changes put back afterwards); that the scripts import in a process of
their own, with only this checkout's src on the path, is checked once for all of them
(test_every_bench_script_starts_in_a_fresh_process). verdict_stability.py (no torch) still runs as a process;
gpu_decode.py runs as one in tests/test_bench_gpu_decode.py, where its smoke run's columns and --profile are checked.

verifier_load.py's whole run starts a dozen fresh processes (a load each, cold cells, warm and resident servers),
most of a minute of CPU even at a tiny size, so its main() runs in this process with those processes run here
instead (see its test)."""

import argparse
import contextlib
import importlib
import importlib.util
import io
import json
import os
import runpy
import subprocess
import sys
import types
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import PRELOAD_TORCH, forked_runner, shakespeare_text, tiny_llama

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
# the scripts this file runs (gpu_decode.py: tests/test_bench_gpu_decode.py); a new script of bench/ needs a smoke run
# here (test_every_bench_script_is_run)
RUN_HERE = {
    "cpu_decode_before_after.py",
    "decode_speed.py",
    "drafter_curve.py",
    "gpu_decode.py",
    "lookup_vs_transformers.py",
    "training_acceptance.py",
    "verdict_stability.py",
    "verifier_load.py",
}
VOCAB = 96  # tiny_llama's vocabulary


def bench(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python bench/SCRIPT ARGS`` in ``cwd``, this checkout's src first on the path; it must exit 0."""
    path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH")) if p)
    run = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, f"bench/{script} exited {run.returncode}:\n{run.stderr[-3000:]}"
    return run


def run_script(script: str, *args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    """``python bench/SCRIPT ARGS`` in ``cwd``, run in this process: runpy runs the file as ``__main__`` with the
    sys.argv and the path that command gives it (the script's folder, then this checkout's src), and what it
    prints and the status it exits with are what the process's would be (``sys.exit("message")``: status 1, the
    message on stderr); ``check``: it must exit 0. The process-wide settings a script changes (the working
    directory, sys.argv, sys.path, torch's threads, grad mode and random state) are put back afterwards, so the
    tests after it see none of them."""
    path = BENCH / script
    saved = sys.argv, sys.path[:], os.getcwd()
    torch_saved = torch.get_num_threads(), torch.is_grad_enabled(), torch.random.get_rng_state()
    stdout, stderr, code = io.StringIO(), io.StringIO(), 0
    try:
        sys.argv, sys.path[:0] = [str(path), *args], [str(BENCH), str(ROOT / "src")]
        os.chdir(cwd)
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            runpy.run_path(str(path), run_name="__main__")
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 0 if exit.code is None else 1
        if isinstance(exit.code, str):
            stderr.write(exit.code + "\n")  # as the interpreter prints it
    finally:
        sys.argv, sys.path[:] = saved[0], saved[1]
        os.chdir(saved[2])
        torch.set_num_threads(torch_saved[0])
        torch.set_grad_enabled(torch_saved[1])
        torch.random.set_rng_state(torch_saved[2])
    run = subprocess.CompletedProcess([str(path), *args], code, stdout.getvalue(), stderr.getvalue())
    assert not check or code == 0, f"bench/{script} exited {code}:\n{run.stderr[-3000:]}"
    return run


def word_tokenizer():
    """A word-level tokenizer of tiny_llama's ids: <unk> and Hamlet's most frequent words (split at whitespace), so
    that any text is many tokens of many ids; one id per character would be four times as many tokens, and
    decode_speed.py --draft-vocab-size tokenizes every play (5 s more)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    words = [word for word, _ in Counter(shakespeare_text().split()).most_common(VOCAB - 1)]
    tokenizer = Tokenizer(WordLevel({"<unk>": 0, **{w: i + 1 for i, w in enumerate(words)}}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="<unk>")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny verifier (``v/``, 2 layers) and drafter (``d/``, 1 layer), each with the word tokenizer, long
    enough for lookup_vs_transformers.py's 1,024-token prompt."""
    root = tmp_path_factory.mktemp("tiny")
    for name, seed, layers in (("v", 0, 2), ("d", 1, 1)):
        tiny_llama(seed=seed, layers=layers, max_positions=2048).save_pretrained(root / name)
        word_tokenizer().save_pretrained(root / name)
    return root


def table_rows(stdout: str, header_start: str) -> list[list[str]]:
    """The whitespace-separated rows of a plain-text table, from its header line to the next blank line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(header_start))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        if not set(line.strip()) <= {"-"}:
            rows.append(line.split())
    return rows


def test_every_bench_script_is_run():
    assert {p.name for p in BENCH.glob("*.py")} == RUN_HERE


def test_every_bench_script_starts_in_a_fresh_process():
    """The scripts the tests below run in this process (run_script) start as ``python bench/X.py --help`` in a
    process of their own, with only this checkout's src on the path (conftest.forked_runner: PYTHONPATH): their
    imports need nothing of this process's, and each prints its flags. Each child imports budgetdraft afresh; torch
    and transformers were imported once by the process it is forked from."""
    scripts = ["decode_speed.py", "drafter_curve.py", "lookup_vs_transformers.py", "training_acceptance.py"]
    with forked_runner(PRELOAD_TORCH) as run:
        for script in map(str, (BENCH / s for s in scripts)):
            status, output = run(
                f"import os, runpy, sys\nsys.argv, sys.path[0] = [{script!r}, '--help'], os.path.dirname({script!r})\n"
                f"runpy.run_path({script!r}, run_name='__main__')"
            )
            assert status == 0 and output.startswith("usage: "), f"{script} --help:\n{output[-3000:]}"
            assert "--new-tokens" in output or not script.endswith("decode_speed.py")


def test_decode_speed_runs_every_method_and_writes_its_json(tiny, tmp_path):
    out = tmp_path / "speed.json"
    run = run_script(
        "decode_speed.py", "--verifier", str(tiny / "v"), "--drafter", str(tiny / "d"), "--prompt-tokens", "48",
        "--new-tokens", "6", "--budget", "16", "--gamma", "2", "--repeats", "1", "--cost-steps", "1",
        "--threads", "1", "--self-draft", "--draft-vocab-size", "8", "--json", str(out), cwd=tmp_path,
    )  # fmt: skip
    record, printed = json.loads(out.read_text()), table_rows(run.stdout, "method")
    assert len(printed) == len(record["rows"]) and printed[0][:2] == ["our", "AR"]
    assert all(row[-1] == "True" for row in printed)  # the lossless column
    methods = [row["method"] for row in record["rows"]]
    assert methods[0] == "our AR" and "HF greedy" in methods and "HF assisted γ=2" in methods
    assert "our SD self-draft full" in methods and any(m.endswith(" via generate()") for m in methods)
    assert any("vocab=8" in m for m in methods) and sum(m.startswith("our SD ") for m in methods) >= 5
    assert all(row["lossless"] for row in record["rows"]), [r["method"] for r in record["rows"] if not r["lossless"]]
    assert {"c", "c_budget", "c_budget_vocab", "verify_over_step"} <= set(record["costs"])
    assert {"our_AR_over_HF_greedy", "generate_overhead"} <= set(record["ratios"])
    assert "step costs (median of 1" in run.stdout and "via generate() - direct call, CPU time" in run.stdout


def test_decode_speed_profiles_each_method(tiny, tmp_path):
    run = run_script(
        "decode_speed.py", "--verifier", str(tiny / "v"), "--drafter", str(tiny / "d"), "--prompt-tokens", "32",
        "--new-tokens", "4", "--budget", "16", "--gamma", "2", "--threads", "1", "--policies", "topk_chunks",
        "--no-hf", "--profile", cwd=tmp_path,
    )  # fmt: skip
    profiled = [line for line in run.stdout.splitlines() if line.startswith("===== ")]
    assert [line.split(":")[0] for line in profiled] == [
        "===== our AR",
        "===== our SD topk_chunks B=16",
        "===== our SD topk_chunks B=16 via generate()",
    ]
    assert "tottime" in run.stdout


def test_drafter_curve_trains_and_prints_acceptance_at_each_step(tiny, tmp_path):
    from budgetdraft.decoding.loading import load_model
    from budgetdraft.training.targets import save_targets, teacher_targets

    ids = torch.randint(1, VOCAB, (4, 40), generator=torch.Generator().manual_seed(2))
    targets = teacher_targets(load_model(str(tiny / "v")), ids, 32, prefill_chunk=16, progress=False)
    save_targets(tmp_path / "targets.safetensors", ids, targets, 32, "tiny")
    pd.DataFrame({"input_ids": [list(range(1, 41))]}).to_parquet(tmp_path / "p.parquet")
    hparams = {"lr": 1e-3, "warmup_steps": 1, "budgets": [8, 16], "budget_weights": [0.5, 0.5], "chunk_size": 4,
               "score_window": 4}  # fmt: skip
    run = run_script(
        "drafter_curve.py", "--verifier", str(tiny / "v"), "--init", str(tiny / "d"), "--targets",
        str(tmp_path / "targets.safetensors"), "--hparams", json.dumps(hparams), "--eval-at", "0", "2",
        "--prompts", str(tmp_path / "p.parquet"), "--num-prompts", "1", "--budgets", "16", "0", "--gamma", "2",
        "--new-tokens", "6", "--threads", "1", cwd=tmp_path,
    )  # fmt: skip
    rows = table_rows(run.stdout, "step budget")
    assert [(r[0], r[1]) for r in rows] == [("0", "16"), ("0", "full"), ("2", "16"), ("2", "full")]
    assert all(0 <= float(r[2]) <= 1 and int(r[4]) > 0 for r in rows)  # α of the drafted tokens, and their count
    assert '"steps": 2' in run.stdout.splitlines()[0]  # the hparams it trained with


def test_training_acceptance_prints_each_drafter_at_each_budget(tiny, tmp_path):
    run = run_script(
        "training_acceptance.py", "--verifier", str(tiny / "v"), "--drafter", f"untrained={tiny / 'd'}",
        "--drafter", str(tiny / "v"), "--budgets", "16", "32", "--gamma", "2", "--prompt-len", "40",
        "--num-prompts", "2", "--new-tokens", "6", "--threads", "1", cwd=tmp_path,
    )  # fmt: skip
    rows = table_rows(run.stdout, "drafter")
    assert [(r[0], r[1]) for r in rows] == [("untrained", "16"), ("untrained", "32"), (str(tiny / "v"), "16"),
                                             (str(tiny / "v"), "32")]  # fmt: skip
    assert all(r[-1] == "True" for r in rows)  # lossless


def test_lookup_vs_transformers_prints_one_json_line_per_prompt(tiny, tmp_path):
    run = run_script(
        "lookup_vs_transformers.py", "--verifier", str(tiny / "v"), "--new-tokens", "6", "--gamma", "2",
        "--repeats", "1", "--threads", "1", cwd=tmp_path,
    )  # fmt: skip
    rows = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    assert [r["prompt"] for r in rows] == ["hamlet-512", "passage-x4", "sotu-1024"]
    assert [r["prompt_tokens"] for r in rows] == [512, 256, 1024]
    for row in rows:
        assert all(row["identical_to_ours_ar"].values()), row
        assert {"ours_ar", "hf_greedy", "ours_lookup", "hf_lookup"} <= set(row)
        assert {"median_s", "acceptance", "proposed"} <= set(row["ours_lookup"])


def test_verdict_stability_compares_two_sets_of_replicates(tmp_path):
    from test_claims import SETTINGS, write_replicated

    results = tmp_path / "results"
    write_replicated(results / "cells", [0.0, -0.1])  # replicate 1's BudgetDraft accepts 10 pp less
    (results / "tables").mkdir()
    (results / "tables" / "main.sources.json").write_text(json.dumps({"settings": SETTINGS}))
    run = bench("verdict_stability.py", "--results", str(results), "--json", str(tmp_path / "v.json"), cwd=tmp_path)
    assert run.stdout.startswith("| finding | replicates [0] | replicates [1] | same verdict |")
    assert "| F2/1K | " in run.stdout and "findings get the same verdict in all 2 sets of 1 replicate(s)" in run.stdout
    verdicts = json.loads((tmp_path / "v.json").read_text())
    assert set(verdicts) == {"[0]", "[1]"} and {"verdict", "value"} <= set(verdicts["[0]"]["F2/1K"])


@pytest.mark.real
def test_cpu_decode_before_after_prints_one_json_line(tmp_path):
    run = bench(
        "cpu_decode_before_after.py", "--label", "smoke", "--prompt-tokens", "32", "--new-tokens", "4",
        "--budget", "16", "--gamma", "2", "--repeats", "1", cwd=tmp_path,
    )  # fmt: skip
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["label"] == "smoke" and len(out["ar"]["tokens"]) == 4
    assert out["sd"]["tokens"] == out["ar"]["tokens"]  # lossless
    for method in ("ar", "sd"):
        assert {"decode_s_per_token", "total_wall_s", "total_cpu_s"} <= set(out[method])
        assert out[method]["total_cpu_s"]["n"] == 1


def test_verifier_load_runs_its_whole_main_on_a_tiny_7b_shaped_model(tmp_path, monkeypatch, capsys):
    """verifier_load.py's main() end to end on its 7B config cut to one 128-wide head (paper_models), in this
    process: its LOAD script (a fresh process each in the benchmark) is exec'd here for both exports, and the
    budgetdraft commands it starts (cold eval-cells, warm and resident servers) are parsed by the commands' own
    parsers rather than run: every flag it passes must still exist. `--help` runs as a script."""
    assert "--cells-per-job" in bench("verifier_load.py", "--help", cwd=tmp_path).stdout
    import paper_models

    from budgetdraft.pipeline import cli

    monkeypatch.setattr(paper_models, "YARN_LLAMA_2_7B_128K", paper_models.yarn_llama_2_7b_128k(heads=1))
    monkeypatch.setattr(sys, "path", list(sys.path))  # the script puts src and tests first
    spec = importlib.util.spec_from_file_location("verifier_load", BENCH / "verifier_load.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    started = []

    def parsed(argv: list[str]) -> argparse.Namespace:
        assert argv[:3] == [sys.executable, "-m", "budgetdraft"], argv
        parser = argparse.ArgumentParser(prog=f"budgetdraft {argv[3]}")
        importlib.import_module(cli.COMMANDS[argv[3]][0]).configure_parser(parser)
        started.append(argv[3])
        return parser.parse_args(argv[4:])

    def run(argv, **_):
        if argv[1] != "-c":  # an eval-cell
            parsed(argv)
            return subprocess.CompletedProcess(argv, 0, "", "")
        started.append(f"load {argv[3]}")
        stdout = io.StringIO()
        with monkeypatch.context() as m, contextlib.redirect_stdout(stdout):
            m.setattr(sys, "argv", argv[2:])
            exec(compile(argv[2], "verifier_load.LOAD", "exec"), {"__name__": "__main__"})
        return subprocess.CompletedProcess(argv, 0, stdout.getvalue(), "")

    def popen(argv, **_):  # a warm or resident server: its socket appears
        Path(parsed(argv).socket).touch()
        return types.SimpleNamespace(terminate=lambda: None, wait=lambda: 0)

    fake = types.SimpleNamespace(run=run, Popen=popen, DEVNULL=subprocess.DEVNULL, STDOUT=subprocess.STDOUT)
    monkeypatch.setattr(script, "subprocess", fake)
    monkeypatch.setenv("BENCH_TMP", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["verifier_load.py", "--layers", "1", "2", "--loads", "1", "--cell-runs", "1"])
    script.main()
    printed = capsys.readouterr().out
    assert sorted(started) == sorted(["load before", "load after"] * 2 + ["eval-cell"] * 6 + ["warm"] * 2)
    assert "| layers | export fp32 (before) | export fp16 (after) |" in printed
    assert "| 1 | " in printed and "| 2 | " in printed and "At 32 layers (extrapolated): export" in printed
    assert "Per-cell overhead" in printed and "cold " in printed and "resident " in printed
