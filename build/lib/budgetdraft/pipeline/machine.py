"""The machine a run is on, measured: what `estimate --gpu here` costs the jobs with, instead of constants taken on
another machine (a clean default run took 43 min on one 2-core CPU and 79 min on another of the same kind).

A probe of a few seconds times what the jobs do, on the run's own device and dtypes, with random-weight models of
the configured shapes (`budgetdraft.pipeline.probe`: what one probe times, and the roofline constants solved from
its timings). ``parallel`` copies run at once, as the workflow runs that many jobs side by side on the machine, so
memory bandwidth is shared as in the run.

Every probe runs in a fresh Python process of its own (`ProbeProcess`: subprocess.Popen of this interpreter), and so
does the warm process `job_seconds` times cells through (`WarmServer`): this process is never forked. It may be
Snakemake's own (`snakemake all` prints the prediction before its first job), and a fork of a process with threads
keeps every lock another thread held, for good: a warm process forked from Snakemake's never came up, its probe held
the cache's lock, and every Snakemake that wanted the lock waited for ever. The processes start beside the
estimate's dry run of the workflow and import there (torch, transformers, the commands' modules); the timings begin
once the dry run is done (``quiet``) and every process has imported. Every wait on one of them, and on the cache's
lock, has a limit (`START_S`, `PROBE_S`, `CELL_S`, `LOCK_S`) past which the probe stops in one line naming what did
not answer.

The result is cached per machine (CPU model, visible cores, torch, device, threads, parallel jobs, the shapes probed)
under ``$BUDGETDRAFT_CACHE/machine/``: measured once, reused, re-measured with ``--remeasure``. The file is written
whole, with a lock held, so two runs that start at once probe once (``base.atomic``), and read back only when it is
this machine's and every figure is one a probe gives (`measure_problem`): a file forged or damaged (a bandwidth of
-3, NaN, 1e300, a key of another CPU) is probed again, saying so in one line that names it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import select
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from budgetdraft.base.defaults import CPU_ALLOCATOR_ENV, with_cpu_allocator
from budgetdraft.pipeline.probe import (
    PREFILL_TOKENS,
    PROBE_LAYERS,
    VERIFY_ROWS,
    Probe,
    probe_once,
    shallow_layers,
    solve,
)
from budgetdraft.pipeline.roofline import BYTES

PROBE_CONTEXT = 512  # prompt tokens of the probe's decode steps at most (the shortest context, when shorter)
PROBE_VERSION = 4  # what a probe measures (2: the verifier at 6 and 2 layers; 3: a verify with the LM head on as
# many rows as the verifier runs it on, the packed layout measured; 4: the training steps in transformers' own
# layout, as training loads a drafter): a measure of another is another file
# How long the probe waits for each thing it waits on, at most (seconds): far past what each takes on a 2-core CPU,
# and then it stops in one line instead of waiting for ever
START_S = 180  # a fresh process importing torch and the commands' modules (about 8 s)
PROBE_S = 600  # one probe's timings (about 12 s at SmolLM2's shapes on the CPU)
CELL_S = 120  # one eval-cell of `job_seconds` through the warm process (under a second)
LOCK_S = 900  # another run's probe of the same measure, holding the cache's lock (its dry run, START_S, PROBE_S)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# Snakemake's own CPU per job, not probed: 13.2 s over 84 jobs, ~0.16 s (bench/README.md, "Pipeline overhead")
SNAKEMAKE_JOB_S = 0.2


def package_env() -> dict[str, str]:
    """This process's environment, with the folder this package was imported from first on PYTHONPATH: a process
    started here imports the same budgetdraft (Snakemake's process finds it through the Snakefile, not an install),
    and the CPU allocator set as `python -m budgetdraft` sets it for the jobs (`defaults.with_cpu_allocator`): the
    probe's processes and the warm process (rules/warm.smk) start so."""
    here = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    with_cpu_allocator(env)
    return env


def last_line(log) -> str:
    """The last line a process wrote to ``log`` (a file open for reading and writing), or what says it wrote none."""
    log.seek(0)
    lines = [line.strip() for line in log.read().splitlines() if line.strip()]
    return lines[-1] if lines else "it wrote nothing"


WARM = ("-m", "budgetdraft", "warm", "--socket")  # the warm process's command line, its socket last


class WarmServer:
    """A warm process (`python -m budgetdraft warm`, a fresh process: subprocess.Popen, never a fork of this one)
    serving on a socket of its own, for `job_seconds`, with its scratch folder (`work`: a tiny model and prompts); it
    imports beside the estimate's dry run, `ready` waits at most until a deadline for its socket, and it is stopped,
    its folder removed, when left."""

    def __enter__(self) -> WarmServer:
        from budgetdraft.pipeline.rendezvous import rendezvous

        self.socket = rendezvous("probe")
        self.work = Path(os.path.dirname(self.socket))
        self.log = tempfile.TemporaryFile("w+")
        self.server = subprocess.Popen([sys.executable, *WARM, self.socket],
                                       stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                                       env=package_env())  # fmt: skip
        return self

    def ready(self, deadline: float) -> None:
        """Return once the warm process serves; raise ValueError (one line) when it has exited, or does not serve
        by ``deadline`` (time.monotonic)."""
        while not os.path.exists(self.socket):
            if self.server.poll() is not None:
                raise ValueError(f"the machine probe's warm process exited ({self.server.returncode}) before it "
                                 f"served: {last_line(self.log)}")  # fmt: skip
            if time.monotonic() > deadline:
                raise ValueError(f"the machine probe's warm process (pid {self.server.pid}) did not serve on "
                                 f"{self.socket} within {START_S} s; nothing was measured")  # fmt: skip
            time.sleep(0.05)

    def __exit__(self, *exc) -> None:
        import shutil

        stop(self.server)
        self.log.close()
        shutil.rmtree(self.work, ignore_errors=True)


def stop(process: subprocess.Popen) -> None:
    """End ``process`` if it still runs: asked first (SIGTERM), killed when it has not ended 10 s later."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


PROBE_MAIN = "from budgetdraft.pipeline.machine import probe_process; probe_process()"
SAID = "budgetdraft-probe: "  # the lines a probe process writes for the estimate (anything else on stdout is not)


class ProbeProcess:
    """One probe in a fresh process (subprocess.Popen of this interpreter running `probe_process`, never a fork of
    this one): it imports what a probe runs as soon as it starts, says 'ready', then runs the probe whose arguments
    `start` sends and answers its `Probe`. ``job_files``: a folder where it also writes `job_seconds`'s tiny model and
    prompts before it says ready (it has torch at hand; this process need not import it). Every answer is waited for
    until a deadline, and a process that exits or stays silent is named in one line (`answer`)."""

    def __init__(self, job_files: Path | None = None):
        self.log = tempfile.TemporaryFile("w+")
        self.pending = b""
        self.process = subprocess.Popen([sys.executable, "-c", PROBE_MAIN, *([str(job_files)] if job_files else [])],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
                                        env=package_env())  # fmt: skip

    def __enter__(self) -> ProbeProcess:
        return self

    def __exit__(self, *exc) -> None:
        stop(self.process)
        self.process.stdout.close()
        self.log.close()

    def answer(self, deadline: float, what: str) -> str:
        """The next line the process says (`SAID`), waited for until ``deadline`` (time.monotonic); ``what``: what
        it is doing meanwhile, for the ValueError (one line) when it exits or is silent until then."""
        out = self.process.stdout.fileno()
        while True:
            line, newline, rest = self.pending.partition(b"\n")
            if newline:
                self.pending = rest
                if line.startswith(SAID.encode()):
                    return line[len(SAID) :].decode()
                continue
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([out], [], [], left)[0]:
                raise ValueError(f"the machine probe's process (pid {self.process.pid}) was still {what} when its "
                                 "time was up; nothing was measured")  # fmt: skip
            chunk = os.read(out, 1 << 16)
            if not chunk:
                code = self.process.wait(timeout=10)
                raise ValueError(f"the machine probe's process exited ({code}) while {what}: {last_line(self.log)}")
            self.pending += chunk

    def ready(self, deadline: float) -> None:
        self.answer(deadline, f"importing torch and the probe's modules (for {START_S} s)")

    def start(self, args: dict) -> None:
        """Send the probe's arguments (`probe_once`'s, as JSON): the process times from now."""
        self.process.stdin.write((json.dumps(args) + "\n").encode())
        self.process.stdin.close()

    def result(self, deadline: float) -> Probe:
        return Probe(**json.loads(self.answer(deadline, f"timing its probe (for {PROBE_S} s)")))


def probe_process() -> None:
    """A probe process's body (`ProbeProcess`): import what a probe runs, write `job_seconds`'s files when given a
    folder (argv[1]), say 'ready', read one probe's arguments (JSON on stdin), run it and say its `Probe` (JSON)."""
    from budgetdraft.decoding import layout, loop  # noqa: F401 - what the probe runs, imported before it times
    from budgetdraft.pipeline.roofline import Shape
    from budgetdraft.training import train  # noqa: F401

    if len(sys.argv) > 1:
        job_files(Path(sys.argv[1]))
    print(SAID + "ready", flush=True)
    args = json.loads(sys.stdin.readline())
    args.update(verifier_shape=Shape(**args["verifier_shape"]), drafter_shape=Shape(**args["drafter_shape"]))
    print(SAID + json.dumps(asdict(probe_once(**args))), flush=True)


def job_files(work: Path) -> None:
    """What `job_seconds`'s cell reads, in ``work``: a 2-layer Llama of 128 tokens (``v``) and one 64-token prompt."""
    import pandas as pd
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=None,
    )  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(work / "v")
    pd.DataFrame({"dataset": ["d"], "context": ["c"], "sample": [0], "doc_id": ["probe"],
                  "input_ids": [list(range(3, 67))]}).to_parquet(work / "prompts.parquet")  # fmt: skip


def job_seconds(server: WarmServer, runs: int = 3) -> float:
    """A cell job's fixed seconds beyond its model work: `budgetdraft eval-cell` of a tiny model (2 new tokens of
    AR, `job_files`) started as a rule starts one (a shell, the Python client) and forked from ``server``, a warm
    process that has imported everything, as the workflow runs cells (the median of ``runs``), plus Snakemake's own
    time per job. A cell that fails, or runs past `CELL_S`, is named in one line."""
    from budgetdraft.pipeline.warm import ENV

    cell = ("eval-cell --label ar --decodes ar --verifier v --prompts prompts.parquet --dataset d --context c "
            "--max-new-tokens 2 --warmup 0 --repeats 1 --out results/cells/ar/d/c/B0_g0.parquet")  # fmt: skip
    env = {**package_env(), ENV: server.socket}
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        try:
            done = subprocess.run(["bash", "-c", f"{sys.executable} -m budgetdraft {cell}"], env=env, cwd=server.work,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=CELL_S)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise ValueError(f"the machine probe's cell (budgetdraft {cell.split()[0]} through the warm process) ran "
                             f"past {CELL_S} s and was ended; nothing was measured") from None  # fmt: skip
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or ["it wrote nothing"])[-1]
            raise ValueError(f"the machine probe's cell (budgetdraft {cell.split()[0]} through the warm process) "
                             f"failed ({done.returncode}): {why}")  # fmt: skip
        times.append(time.perf_counter() - start)
    return statistics.median(times) + SNAKEMAKE_JOB_S


def recipe_shares(recipes, parallel: int) -> list[tuple]:
    """The training recipes each of ``parallel`` probes times: dealt out in turn, the longest sequences first, so
    that each is timed once, beside another probe's work (every probe timed all of them: 5 of a probe's 12 s)."""
    ordered = sorted(recipes, key=lambda recipe: -(recipe[1] + recipe[2]))
    return [tuple(ordered[i::parallel]) for i in range(parallel)]


def timed(args: dict, parallel: int, quiet=None) -> tuple[list[Probe], float]:
    """(``parallel`` probes side by side, `job_seconds`) with `probe_once`'s ``args`` (its training recipes shared
    out: `recipe_shares`): the probe processes and the warm process start at once and import while ``quiet()`` runs
    (the estimate's dry run; None: nothing), then, with every one of them ready and nothing else of ours running,
    the probes time together, then the cells."""
    import contextlib

    with contextlib.ExitStack() as stack:
        server = stack.enter_context(WarmServer())
        probes = [stack.enter_context(ProbeProcess(server.work if i == 0 else None)) for i in range(parallel)]
        if quiet is not None:
            quiet()
        deadline = time.monotonic() + START_S
        for process in probes:
            process.ready(deadline)
        server.ready(deadline)
        for process, recipes in zip(probes, recipe_shares(args["recipes"], parallel)):
            process.start({**args, "recipes": recipes})
        deadline = time.monotonic() + PROBE_S
        return [process.result(deadline) for process in probes], job_seconds(server)


def training_recipes(cfg: dict) -> tuple:
    """((hparams JSON, P, C), ...): each distinct training step the config runs (the variants at the training data's
    P and C, λ > 0 or not; the base drafter at its own), to time on the drafter's probe."""
    recipes = {}
    tr, data = cfg["training"], cfg["training_data"]
    for overrides in cfg.get("variants", {}).values():
        if "checkpoint" in overrides:
            continue
        hp = {**tr, **overrides, "device": cfg.get("device", "cpu")}
        key = (float(hp.get("lambda_c", 0)) > 0, data["prefix_len"], data["cont_len"])
        recipes.setdefault(key, (json.dumps(hp, sort_keys=True), data["prefix_len"], data["cont_len"]))
    if base := cfg.get("base_drafter"):
        hp = {**tr, **base["training"], "lambda_c": 0, "device": cfg.get("device", "cpu")}
        d = base["data"]
        recipes.setdefault((False, d["prefix_len"], d["cont_len"]), (json.dumps(hp, sort_keys=True), d["prefix_len"],
                                                                      d["cont_len"]))  # fmt: skip
    return tuple(recipes.values())


def key_of(cfg: dict, device: str, parallel: int) -> dict:
    """What a measure is of: this machine, torch (its installed version: torch itself is not imported until a probe
    runs), the jobs side by side, the config's models as served (`served_shape`), dtypes and training steps."""
    from importlib.metadata import version

    from budgetdraft.pipeline.roofline import served_shape

    return {
        "probe": PROBE_VERSION, "cpu": cpu_name(), "cores": cores(), "torch": version("torch"), "device": device,
        "threads": cfg.get("threads", 1), "parallel": parallel, "verifier": asdict(served_shape(cfg, "verifier")),
        "drafter": asdict(served_shape(cfg, "drafter")), "dtypes": [cfg["verifier_dtype"], cfg["drafter_dtype"]],
        "allocator": {name: package_env()[name] for name in CPU_ALLOCATOR_ENV},
        "recipes": [[json.loads(h).get("lambda_c", 0), p, c] for h, p, c in training_recipes(cfg)],
    }  # fmt: skip


def check_measurable(device: str) -> None:
    """A config's ``device`` this machine has, or an error that says how to estimate for another machine."""
    if not device.startswith("cuda"):
        return
    import torch

    if not torch.cuda.is_available():
        raise ValueError(
            f"device: {device} in the config, and this machine has no CUDA device to measure: run the estimate on "
            "the machine the run will use, or name one (--gpu a100-80g, h100-80g)"
        )


def device_memory_gb(device: str) -> float:
    """GiB of ``device``'s memory (torch is imported for a GPU only: on the CPU it took 2 s of a cached estimate)."""
    if device.startswith("cuda"):
        import torch

        return torch.cuda.get_device_properties(torch.device(device)).total_memory / 2**30
    import psutil

    return psutil.virtual_memory().total / 2**30


def probe_layers(verifier_shape, dtype: str, parallel: int, memory_bytes: float) -> int:
    """The verifier layers a probe builds (at most ``PROBE_LAYERS``) so that ``parallel`` probes fit in half of
    ``memory_bytes`` (each holds its verifier twice while it times a load): a 7B verifier's 16 layers in fp16 are
    6.5 GB, two probes and their reloads more than a 24 GB machine has (they were killed, after minutes). Raises
    ValueError when not even 2 layers fit (the per-layer cost is solved from two depths)."""
    from dataclasses import replace

    size = BYTES[dtype]
    layer = replace(verifier_shape, layers=1).body * size
    head = (1 if verifier_shape.tied else 2) * verifier_shape.vocab * verifier_shape.hidden * size
    fit = int((memory_bytes / 2 / parallel / 2 - head) // layer)
    if fit < 2:
        raise ValueError(
            f"a probe of the verifier's shape ({verifier_shape.hidden} wide, {dtype}) does not fit in this machine's "
            f"{memory_bytes / 2**30:.1f} GiB available with {parallel} at once: no measurement here (estimate it on a "
            "named device: python -m budgetdraft estimate --gpu NAME)"
        )
    return min(PROBE_LAYERS, verifier_shape.layers, fit)


def available_memory(device: str) -> float:
    """Bytes a probe may use on ``device``: a GPU's total memory, else the memory available now."""
    import psutil

    return device_memory_gb(device) * 2**30 if device.startswith("cuda") else psutil.virtual_memory().available


# Each figure of a cached measure (`probe`'s result) -> (the least, whether the least itself may be, the most) a
# probe gives: no step, load or job of a probe takes an hour, and the rates are far past any machine's (an H200
# reads 4.8e12 bytes/s), so a file past them was not written by a probe (a bandwidth of 1e300 predicted a run of a
# 300-digit number of hours; -3, a negative one)
SECONDS = (0.0, False, 3600.0)
FIGURES = {
    "bandwidth": (0.0, False, 1e16),  # bytes/s of memory a decode step reads
    "flops": (0.0, False, 1e20),
    "disk": (0.0, False, 1e16),  # bytes/s of a model's load
    "layer_overhead_s": (0.0, True, 3600.0),  # 0 where the two steps do not separate it (`solve`)
    "drafter_step_s": SECONDS,
    "verify_factor": (0.0, False, 1e3),
    "job_s": SECONDS,
    "probe_s": (0.0, False, 86400.0),
    "context": (0.0, False, PROBE_CONTEXT),
    "verifier_step.fixed_s": (0.0, True, 3600.0),
    "verifier_step.per_layer_s": (0.0, True, 3600.0),
    "timings.verifier_layers": (0.0, False, PROBE_LAYERS),
    "timings.verifier_step_s": SECONDS,
    "timings.drafter_step_s": SECONDS,
    "timings.prefill_s": SECONDS,
    "timings.load_s": SECONDS,
    "timings.load_bytes": (0.0, False, 1e15),
}


def figure_problem(name: str, value, bounds: tuple) -> str | None:
    """Why ``value`` is not the figure ``name`` a probe gives (None: it is), within ``bounds`` (`FIGURES`)."""
    least, inclusive, most = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} {value!r} is not a number"
    if not (value >= least if inclusive else value > least) or not math.isfinite(value):
        return f"{name} {value!r} is not " + ("a finite number >= 0" if inclusive else "a positive number")
    if value > most:
        return f"{name} {value!r} is more than {most:g}, which no probe measures"
    return None


def measure_problem(found, key: dict) -> str | None:
    """Why ``found``, a cached measure, is not this machine's measure under ``key`` (None: it is): not a JSON
    object, a figure missing or not one a probe gives (`FIGURES`, and the training steps' seconds), or measured
    under another key (another CPU, core count, torch, config shapes: a file copied or forged)."""
    if not isinstance(found, dict):
        return f"holds {type(found).__name__}, not a measure (a JSON object)"
    for name, bounds in FIGURES.items():
        value = found
        for part in name.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if value is None:
            return f"{name} is missing"
        if why := figure_problem(name, value, bounds):
            return why
    steps = found.get("train_step_s")
    if not isinstance(steps, dict):
        return f"train_step_s {steps!r} is not a mapping of training steps to seconds"
    for recipe, seconds in steps.items():
        if why := figure_problem(f"train_step_s[{recipe}]", seconds, SECONDS):
            return why
    if not isinstance(found.get("measured"), str):
        return f"measured {found.get('measured')!r} is not a date"
    ours = json.loads(json.dumps(key))
    theirs = found.get("key") if isinstance(found.get("key"), dict) else {}
    for field, value in ours.items():
        if theirs.get(field) != value:
            return f"it was measured with {field} {theirs.get(field)!r}, and this machine and config have {value!r}"
    return None


def read_measure(path: Path, key: dict) -> tuple[dict | None, str | None]:
    """(the measure cached at ``path``, None) when it is this machine's under ``key``, else (None, why not)."""
    try:
        found = json.loads(path.read_text())
    except UnicodeDecodeError:
        return None, "is not text"
    except ValueError as err:
        return None, f"is not JSON ({err})"
    why = measure_problem(found, key)
    return (None, why) if why else (found, None)


def age_problem(found: dict, max_age_s: float) -> str | None:
    """Why ``found``, a cached measure of this machine, is too old to trust (None: it is not): measured more than
    ``max_age_s`` seconds ago, at a time it does not record, or at a time still to come. A VM's speed moves 10-30 %
    within a day (bench/README.md, "The 45 minutes again"): a probe taken that morning predicted a run 25 % long."""
    at = found.get("measured_s")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        return "it records no time it was measured at (measured_s)"
    age = time.time() - at
    if age < 0:
        return f"it was measured {-age / 3600:.1f} h from now, by this machine's clock"
    if age > max_age_s:
        return f"it was measured {age / 3600:.1f} h ago, not within the last {max_age_s / 3600:g} h"
    return None


def measure_file(key: dict) -> Path:
    """Where the measure of ``key`` (`key_of`) is cached: ``$BUDGETDRAFT_CACHE/machine/DIGEST.json``."""
    from budgetdraft.base.cache import cache_root

    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "machine" / f"{digest}.json"


def measure(
    cfg: dict, parallel: int, remeasure: bool = False, say=print, quiet=None, max_age_s: float | None = None
) -> dict:
    """This machine's constants for ``cfg`` (its models' shapes, dtypes, device and threads) with ``parallel``
    jobs side by side: from the cache when it holds this machine's measure (`read_measure`) taken at most
    ``max_age_s`` seconds ago (None: any age; `age_problem`), else probed now (``parallel`` processes at once, timed
    once ``quiet()`` returns: `probe`) and cached; a cached file that cannot be used is named, with why, by ``say``.
    Another run probing the same measure is waited for `LOCK_S` at most."""
    from budgetdraft.base.atomic import atomic_write_text, file_lock

    device = cfg.get("device", "cpu")
    check_measurable(device)
    key = key_of(cfg, device, parallel)
    cached = measure_file(key)
    try:
        with file_lock(cached, timeout=LOCK_S):  # a second run started beside this one waits, then reads the file
            if not remeasure and cached.is_file():
                found, problem = read_measure(cached, key)
                if problem is None and max_age_s is not None:
                    problem = age_problem(found, max_age_s)
                if problem is None:
                    return found
                say(f"{cached}: {problem}; probing again")
            result = probe(cfg, device, key, parallel, say, quiet)
            atomic_write_text(cached, json.dumps(result, indent=1))
    except TimeoutError:
        raise ValueError(
            f"{cached}.lock: another run has held it for {LOCK_S} s, probing this machine, and this one waited no "
            "longer; nothing was measured (the process holding it: fuser on that file names it)"
        ) from None
    return result


def probe(cfg: dict, device: str, key: dict, parallel: int, say=print, quiet=None) -> dict:
    """This machine's constants for ``cfg``, probed now (``parallel`` processes at once: `timed`), under its ``key``.
    The probe's processes import beside whatever the caller runs until ``quiet()`` returns (the estimate's dry run);
    the timings start after it, with nothing of ours beside them."""
    from budgetdraft.pipeline.roofline import served_shape

    context = min(min(cfg["contexts"].values()), PROBE_CONTEXT)
    verifier = served_shape(cfg, "verifier")
    layers = probe_layers(verifier, cfg["verifier_dtype"], parallel, available_memory(device))
    args = dict(
        verifier_shape=asdict(verifier), drafter_shape=asdict(served_shape(cfg, "drafter")),
        verifier_dtype=cfg["verifier_dtype"], drafter_dtype=cfg["drafter_dtype"], device=device,
        threads=cfg.get("threads", 1), context=context, recipes=training_recipes(cfg), layers=layers,
    )  # fmt: skip
    say(f"measuring this machine ({key['cpu']}, {key['cores']} cores, {parallel} probe(s) at once) ...")
    start = time.perf_counter()
    probes, job_s = timed(args, parallel if device == "cpu" else 1, quiet)
    result = {**solve(probes), "context": context, "job_s": job_s, "key": key}
    result.update(probe_s=time.perf_counter() - start, measured=time.strftime("%F %T"), measured_s=time.time())
    return result


def verifier_steps(m: dict) -> str:
    """The verifier's measured steps and the step they extrapolate to at its own layers, in words."""
    t, step, layers = m["timings"], m["verifier_step"], m["key"]["verifier"]["layers"]
    shallow = t.get("shallow_layers") or shallow_layers(int(t["verifier_layers"]))
    own = step["fixed_s"] + layers * step["per_layer_s"]
    measured = f"a verifier step of {t['verifier_layers']:.0f} layers {t['verifier_step_s'] * 1e3:.1f} ms"
    if layers <= t["verifier_layers"]:
        return measured
    return (
        f"{measured} and of {shallow:.0f} {t['verifier_step2_s'] * 1e3:.1f} ms, extrapolated linearly (fixed + "
        f"layers x per layer) to its {layers} layers: {own * 1e3:.1f} ms"
    )


def here(cfg: dict, parallel: int, remeasure: bool = False, say=print, quiet=None, max_age_s: float | None = None):
    """This machine as an estimate `Device`, measured (`measure`, a cached measure at most ``max_age_s`` old) for
    ``cfg`` with ``parallel`` jobs at a time, its probe's timings started once ``quiet()`` returns (None: at once)."""
    from budgetdraft.pipeline.roofline import Device

    m = measure(cfg, parallel, remeasure, say, quiet, max_age_s)
    k, t = m["key"], m["timings"]
    basis = (
        f"measured on this machine ({k['cpu']}, {k['cores']} cores, torch {k['torch']}) on {m['measured']}, "
        f"{parallel} probe(s) at once in {m['probe_s']:.0f} s: {verifier_steps(m)}, a drafter step "
        f"{t['drafter_step_s'] * 1e3:.1f} ms, a "
        f"{PREFILL_TOKENS}-token prefill {t['prefill_s']:.2f} s, a {t['load_bytes'] / 1e6:.0f} MB load "
        f"{t['load_s']:.2f} s (cached: --remeasure probes again)"
    )
    memory = device_memory_gb(k["device"])
    step = {"context": m["context"], "verify_factor": m["verify_factor"], "verify_rows": VERIFY_ROWS}
    measured = {
        "verifier": {**step, **m["verifier_step"]},
        "drafter": {**step, "fixed_s": m["drafter_step_s"], "per_layer_s": 0.0},
        "train_step_s": m["train_step_s"],
    }
    return Device(
        name=f"this machine ({k['cpu']}, {k['cores']} cores), measured", memory_gb=memory, flops=m["flops"],
        flops32=m["flops"], bandwidth=m["bandwidth"], layer_overhead_s=m["layer_overhead_s"], disk=m["disk"],
        parallel=parallel, basis=basis, cuda=k["device"].startswith("cuda"), measured=measured,
        job_s=m["job_s"],
    )  # fmt: skip
