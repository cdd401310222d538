"""The paper's scale as its users meet it: config/paper.yaml and config/paper_release.yaml run end to end through the
hub's own clients (huggingface_hub, transformers, datasets, the `hf` command) against a local hub that serves the
paper's repositories under their real ids and layouts (tests/localhub.py, tests/paper_hub.py), at tiny widths and
sizes on the CPU. Nothing of the code under test is swapped for a local directory: `HF_ENDPOINT` is the only change.

- `pin` asks the hub for each repository's commit and writes the `revisions:` block; every later read is at those
  commits (the hub's log shows no read of another revision) and a revision the hub does not have is refused;
- config/paper.yaml, its sizes only made tiny (`tiny_sizes`): the prompts of PG-19, LongBench and NarrativeQA,
  training on PG-19 train, every variant, the grid and every artifact;
- config/paper_release.yaml, its sizes made tiny: the authors' released drafters read from their one hub repository
  (main/) and from a copy made as their README makes it (`hf download --local-dir ./ckpts`: aonly/, ac/), no
  training, the single-budget rows "not run"; a checkpoint changed after its export is exported again.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import paper_hub
import paper_models
import pytest
import yaml
from conftest import planned_jobs
from localhub import LocalHub

from budgetdraft.report import paper

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 2304  # prompt tokens: beyond llama-68m's max_position_embeddings (2,048)
PREFIX = 2176  # training prefix P, also beyond 2,048 (and prefilled in two chunks of 2,048 + 128)
TABLES = ["main", "comparison", "ablation_lc", "lambda", "single_budget", "vram_gamma", "vram"]
PROJECT = ("workflow", "config", "profiles", "src", "envs")


def tiny_sizes(cfg: dict) -> dict:
    """A paper config (config/paper.yaml, config/paper_release.yaml) with only its sizes made tiny and its device the
    CPU: one context of 2,304 tokens (beyond the drafter's 2,048 positions), two budgets, one prompt, few tokens and
    steps. Models, datasets, dtypes, policies and the rest stay the paper's."""
    cfg = json.loads(json.dumps(cfg))  # a deep copy
    label, budgets = str(CONTEXT), [256, 1024]
    cfg.update(
        samples=1, contexts={label: CONTEXT}, budgets=budgets, gammas={label: [5]}, max_new_tokens=8, repeats=1,
        warmup_tokens=2, warmup_prompt_tokens=32, device="cpu", threads=1,
        # no prediction before the run: it would probe the 7B verifier's shape (the hub ids' table, not the tiny
        # models served here) in fp16 on this CPU, minutes the test is not about (tests/test_machine.py, estimate)
        estimate_before_run=False,
        training_data={**cfg["training_data"], "sequences": 2, "prefix_len": PREFIX, "cont_len": 16},
    )  # fmt: skip
    cfg["comparison"]["contexts"] = [label]
    cfg["single_budget"].update(context=label, gamma=5, trained_budget=budgets[-1])
    cfg["training"].update(
        steps=1, warmup_steps=1, checkpoint_every=1, budgets=budgets, budget_weights=[0.6, 0.4], device="cpu", threads=1
    )
    for variant in cfg["variants"].values():
        if "budgets" in variant:
            variant.update(budgets=[budgets[-1]], budget_weights=[1.0])
    cfg["baselines"]["triforce"].update(retrieval_budget=1024)
    cfg["baselines"]["eagle3"]["training"].update(steps=1, warmup_steps=1, device="cpu", threads=1)
    cfg["long_generation"].update(budget=budgets[0], max_new_tokens=16)
    return cfg


def test_tiny_sizes_keep_the_papers_models_datasets_and_settings():
    """Only sizes, the device, the threads and the prediction before the run change: the hub models, the hub datasets, the dtypes, the near-tie
    check, the policy and the training recipe's rates stay the paper's."""
    paper_cfg = yaml.safe_load((ROOT / "config/paper.yaml").read_text())
    cfg = tiny_sizes(paper_cfg)
    changed = {k for k in paper_cfg if cfg[k] != paper_cfg[k]}
    assert changed == {
        "samples", "contexts", "budgets", "gammas", "max_new_tokens", "repeats", "device", "threads",
        "training_data", "comparison", "single_budget", "training", "baselines", "long_generation",
    }, changed  # fmt: skip
    assert set(cfg) - set(paper_cfg) == {"estimate_before_run", "warmup_tokens", "warmup_prompt_tokens"}
    assert cfg["estimate_before_run"] is False
    for key in ("verifier", "drafter", "datasets", "verifier_dtype", "drafter_dtype", "lossless_check", "policy"):
        assert cfg[key] == paper_cfg[key], key
    assert cfg["training_data"]["source"] == "pg19_train" and "base_drafter" not in cfg
    assert {k: cfg["training"][k] for k in ("lr", "lambda_c", "grad_clip", "weight_decay", "dtype")} == {
        k: paper_cfg["training"][k] for k in ("lr", "lambda_c", "grad_clip", "weight_decay", "dtype")
    }
    assert CONTEXT > paper_models.LLAMA_68M["max_position_embeddings"] < PREFIX


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """The local hub with the paper's repositories (tests/paper_hub.py), serving for the module."""
    root = tmp_path_factory.mktemp("hub")
    local = LocalHub(root / "repos")
    paper_hub.publish_models(local, paper_models.llama2_like_tokenizer(), root / "work")
    paper_hub.publish_datasets(local)
    with local:
        yield local


def project(work: Path) -> Path:
    work.mkdir(parents=True)
    for name in PROJECT:
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, work / name)
    return work


def run(cmd: list[str], work: Path, env: dict, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
    if check:
        assert done.returncode == 0, " ".join(cmd) + "\n" + done.stdout[-3000:] + done.stderr[-3000:]
    return done


def pinned(work: Path, configfile: str, env: dict) -> dict:
    """`budgetdraft pin` against the hub, its block appended to the config file: {repository: commit}."""
    block = run([sys.executable, "-m", "budgetdraft", "pin", "--configfile", configfile], work, env).stdout
    with open(work / configfile, "a", encoding="utf-8") as f:
        f.write("\n" + block)
    return yaml.safe_load(block)["revisions"]


def snakemake(work: Path, configfile: str, env: dict, *args: str, check: bool = True):
    """``snakemake ARGS --configfile CONFIG --cores 2`` (targets first: --configfile takes what follows it)."""
    return run([sys.executable, "-m", "snakemake", *args, "--configfile", configfile, "--cores", "2"], work, env,
               check)  # fmt: skip


def hub_env(hub: LocalHub, home: Path) -> dict:
    return {**os.environ, **hub.env(home), "OMP_NUM_THREADS": "1", "RAYON_NUM_THREADS": "1",
            "PYTHONPATH": os.environ.get("PYTHONPATH", "")}  # fmt: skip


def reads_only_pinned(hub: LocalHub, revisions: dict) -> None:
    """Every file the hub served was read at its repository's pinned commit."""
    for _, path in hub.requests:
        if "/resolve/" in path:
            repo = path.split("/resolve/")[0].removeprefix("/datasets/").strip("/")
            assert path.split("/resolve/")[1].split("/")[0] == revisions[repo], path


# What the paper config's run makes beyond the release config's (the same verifier, datasets and grid, run whole
# below): the training chain through the hub (PG-19's train split, the targets, every variant and EAGLE-3's head at a
# 2,176-token prefix), measured by a cell of each kind of drafter the release has none of
TRAINED = ["results/drafters/r0/la_only", "results/drafters/r0/lambda0.5", "results/drafters/r0/lambda1.0",
           "results/drafters/r0/single_budget", "results/drafters/eagle3"]  # fmt: skip
TRAINED_CELLS = [f"results/cells/{label}/lwm/{CONTEXT}/B1024_g5.parquet"
                 for label in ("lambda0.5/r0", "single_budget/r0", "eagle3")]  # fmt: skip
# the two configs at tiny sizes, side by side in one copy of the project
PAPER_CONFIG, RELEASE_CONFIG = "config/paper_tiny.yaml", "config/release_tiny.yaml"


@pytest.mark.pipeline
def test_the_paper_configs_run_through_the_hub_and_a_local_copy(hub, tmp_path, monkeypatch):
    """Both paper configs at tiny sizes in one copy of the project, so that what they share (the project, the hub's
    downloads, the exported verifier and drafter, the prompts) is made once: `pin` on each, the plan of `snakemake
    all` on config/paper.yaml, one `snakemake all` on config/paper_release.yaml (the smaller: no training; its plan
    read from the run), then config/paper.yaml's training chain for real (its grid, tables, figures, claims and paper
    diff are the release run's: the same verifier, datasets and grid).

    - the release config runs through the hub and a local copy (`release_planned`, `release_ran`,
      `changed_checkpoint_exported_again`, `unknown_revision_refused`): sizes made tiny and nothing else, λ = 0.5 read
      from the authors' hub repository (main/), L_A only and λ = 1.0 from a copy made as their README makes it
      (`hf download ... --local-dir ./ckpts`), no training job, the single-budget rows "not run: the authors do not
      release this drafter"; the paper's verifier exported, the prompts of PG-19, LongBench and NarrativeQA, every
      cell at 2,304 tokens, every table, figure, the claims and the paper diff, every read at the pinned commits. A
      checkpoint changed in the copy after its export is exported (and measured) again; a revision the hub does not
      have is refused;
    - the paper config trains through the hub (`paper_planned`, `paper_trained`): export -> PG-19 train through the
      hub -> targets -> 4 variants and EAGLE-3 trained at a 2,176-token prefix -> a cell of each at 2,304 tokens with
      the paper's fp16 verifier, every read at the pinned commits; its paper diff's "steps 1 (paper: 5000)" is
      tests/test_paperdiff.py's."""
    work = project(tmp_path / "paper")
    env = hub_env(hub, tmp_path / "hf")
    run(["hf", "download", paper_hub.RELEASE, "--local-dir", str(work / "ckpts")], work, env)
    assert sorted(p.name for p in (work / "ckpts").iterdir() if p.is_dir() and p.name in paper_hub.RELEASED) == [
        "ac", "aonly", "main",
    ]  # fmt: skip
    paper_revisions = paper_planned(hub, work, env)
    release_revisions = release_planned(hub, work, env)
    release_ran(hub, work, env, release_revisions, monkeypatch)
    paper_trained(hub, work, env, paper_revisions)
    changed_checkpoint_exported_again(work, env, tmp_path / "other")
    unknown_revision_refused(work, env)


def paper_planned(hub: LocalHub, work: Path, env: dict) -> dict:
    """config/paper.yaml at tiny sizes pinned (every repository it reads, at the hub's commit) and planned: `all`
    plans the training chain and a cell of each trained drafter, no repository read unpinned. Its revisions."""
    (work / PAPER_CONFIG).write_text(
        yaml.safe_dump(tiny_sizes(yaml.safe_load((ROOT / "config/paper.yaml").read_text())), sort_keys=False)
    )
    revisions = pinned(work, PAPER_CONFIG, env)
    assert revisions == {
        repo: hub.commit(kind, repo, "main")
        for repo, kind in [(paper_hub.VERIFIER, "model"), (paper_hub.DRAFTER, "model"), (paper_hub.PG19, "dataset"),
                           (paper_hub.LONGBENCH, "dataset"), (paper_hub.NARRATIVEQA, "dataset")]
    }  # fmt: skip
    dry = snakemake(work, PAPER_CONFIG, env, "-n", "all")
    assert "read at no pinned revision" not in dry.stderr
    planned = {out for line in re.findall(r"^\s+output: (.+)$", dry.stdout, re.M) for out in line.split(", ")}
    assert set(TRAINED + TRAINED_CELLS) <= planned, sorted(planned)[:20]
    return revisions


def release_planned(hub: LocalHub, work: Path, env: dict) -> dict:
    """config/paper_release.yaml at tiny sizes, L_A only and λ = 1.0 read from ./ckpts, pinned. Its revisions (its
    plan, with no training job: `release_ran`, from the run's own)."""
    cfg = tiny_sizes(yaml.safe_load((ROOT / "config/paper_release.yaml").read_text()))
    for variant in ("la_only", "lambda1.0"):
        cfg["variants"][variant]["checkpoint"] = "./ckpts"
    (work / RELEASE_CONFIG).write_text(yaml.safe_dump(cfg, sort_keys=False))
    revisions = pinned(work, RELEASE_CONFIG, env)
    assert revisions[paper_hub.RELEASE] == hub.commit("model", paper_hub.RELEASE, "main")
    return revisions


def release_ran(hub: LocalHub, work: Path, env: dict, revisions: dict, monkeypatch) -> None:
    """`snakemake all` on the release config: the given drafters exported, the paper's verifier exported with its
    YaRN positions and its tokenizer converted, the prompts of the three datasets at 2,304 tokens, every cell of
    every label with the fp16 verifier, every table traced to its cells, nothing trained, the single-budget rows
    "not run" and the paper diff; every read at the pinned commits."""
    ran = snakemake(work, RELEASE_CONFIG, env, "all")
    planned = planned_jobs(ran.stdout + ran.stderr)  # the run's plan, printed before its first job
    assert "export_model" in planned and not {"train", "train_eagle3", "targets", "prepare_train"} & set(planned)
    assert hub.unknown == []
    reads_only_pinned(hub, revisions)
    for variant in ("la_only", "lambda0.5", "lambda1.0"):
        assert (work / f"results/drafters/given/{variant}/config.json").is_file()
    exported = json.loads((work / "results/models/verifier/config.json").read_text())
    assert exported["max_position_embeddings"] == 131072
    assert (exported.get("rope_parameters") or exported["rope_scaling"])["rope_type"] == "yarn"
    assert (work / "results/models/verifier/tokenizer.json").is_file()  # the SentencePiece model, converted once
    for name in TABLES:
        text = (work / "results/tables" / f"{name}.tex").read_text()
        assert "\\begin{tabular}" in text, name
        with monkeypatch.context() as m:
            m.chdir(work)  # provenance names cells relative to the workflow directory
            assert all(src for _, src in paper.trace_file(f"results/tables/{name}.tex")), name
    import pyarrow.parquet as pq

    for dataset, source in (("gs", "pg19_test"), ("longbench", "longbench_qmsum"), ("lwm", "narrativeqa_lwm")):
        prompts = pq.read_table(work / f"results/data/prompts/{dataset}/{CONTEXT}.parquet").to_pylist()
        assert [len(p["input_ids"]) for p in prompts] == [CONTEXT], source
    lwm_doc = pq.read_table(work / f"results/data/prompts/lwm/{CONTEXT}.parquet").column("doc_id")[0].as_py()
    assert lwm_doc.startswith("narrativeqa:train:0|"), lwm_doc
    cells = sorted((work / "results/cells").rglob("*.parquet"))
    assert {c.relative_to(work / "results/cells").parts[0] for c in cells} == {
        "ar", "sd", "la_only", "lambda0.5", "lambda1.0", "triforce", "pi", "sd@full", "lookup",
        "ar~16", "sd~16", "lambda0.5~16", "lookup~16",  # the copying control (long_generation)
    }  # fmt: skip
    for path in cells:  # every cell decoded at positions 2,304 and beyond, with the paper's fp16 verifier
        for row in pq.read_table(path).to_pylist():
            assert row["prompt_tokens"] == CONTEXT and row["new_tokens"] >= 1, path
            assert json.loads(row["config"])["verifier_dtype"] == "float16", path
    assert not (work / "results/drafters/r0").exists()  # nothing trained
    single = (work / "results/tables/single_budget.tex").read_text()
    assert "the authors do not release this drafter" in single
    diff = (work / "results/paper_diff.md").read_text()
    assert "not a rerun" in diff.splitlines()[0] and "The paper's own inconsistencies" in diff


def paper_trained(hub: LocalHub, work: Path, env: dict, revisions: dict) -> None:
    """The paper config's training chain and a cell of each trained drafter, run for real through the hub: every
    variant's weights and loss log at the 2,176-token prefix, EAGLE-3's head, each cell at 2,304 tokens with the
    fp16 verifier; every read at the pinned commits (PG-19's train split among them: the release reads none)."""
    hub.requests.clear()
    snakemake(work, PAPER_CONFIG, env, *TRAINED, *TRAINED_CELLS)
    assert hub.unknown == [] and hub.requests
    reads_only_pinned(hub, revisions)
    import pyarrow.parquet as pq

    for variant in TRAINED[:-1]:  # every step of the tiny recipe at the 2,176-token prefix logged
        assert (work / variant / "model.safetensors").is_file() and (work / variant / "loss_log.csv").is_file()
    assert (work / "results/drafters/eagle3/head.safetensors").is_file()
    for path in TRAINED_CELLS:
        for row in pq.read_table(work / path).to_pylist():
            assert row["prompt_tokens"] == CONTEXT and row["new_tokens"] >= 1, path
            assert json.loads(row["config"])["verifier_dtype"] == "float16", path


def changed_checkpoint_exported_again(work: Path, env: dict, other: Path) -> None:
    """The copy's L_A-only weights replaced at the same path, even with their old modification time: the release
    plan exports it again (and measures again what reads it), and only it."""
    weights = work / "ckpts/aonly/model.safetensors"
    stat = weights.stat()
    paper_models.write_model(paper_hub.llama_68m(), other, paper_models.llama2_like_tokenizer(), seed=99)
    shutil.copy(other / "model.safetensors", weights)
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = snakemake(work, RELEASE_CONFIG, env, "-n", "all").stdout
    assert "output: results/drafters/given/la_only\n" in again  # exported again, and what reads it measured again
    assert (
        "output: results/drafters/given/lambda1.0\n" not in again
        and "output: results/drafters/given/lambda0.5\n" not in again
    )


def unknown_revision_refused(work: Path, env: dict) -> None:
    """The release pinned at a revision the hub does not have: exporting its drafter fails, its log naming the
    repository and the revision."""
    bad = yaml.safe_load((work / RELEASE_CONFIG).read_text())
    bad["revisions"][paper_hub.RELEASE] = "0" * 40
    (work / "config/bad.yaml").write_text(yaml.safe_dump(bad, sort_keys=False))
    shutil.rmtree(work / "results/drafters/given/lambda0.5")
    refused = snakemake(work, "config/bad.yaml", env, "results/drafters/given/lambda0.5", check=False)
    log = (work / "logs/drafters/given/lambda0.5.log").read_text()
    assert (
        refused.returncode != 0 and f"cannot read the hub repository {paper_hub.RELEASE} at revision {'0' * 40}" in log
    )
