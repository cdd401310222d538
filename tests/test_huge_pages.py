"""torch's CPU allocator on transparent huge pages (`base.defaults.CPU_ALLOCATOR_ENV`): every `python -m budgetdraft`
process (each pipeline job, the warm process) and the machine probe's processes run with it unless the environment
says otherwise; bench/README.md, "Huge pages", measures what it buys."""

import os
import subprocess
import sys

import pytest

from budgetdraft.base.defaults import CPU_ALLOCATOR_ENV
from budgetdraft.pipeline import machine

# `python -m budgetdraft` with no command (it prints its usage and exits), saying at exit what its environment held
SAYS_ENV = (
    "import atexit, os, runpy, sys; "
    f"atexit.register(lambda: print('env', {{n: os.environ.get(n) for n in {list(CPU_ALLOCATOR_ENV)!r}}})); "
    "sys.argv = ['budgetdraft']; runpy.run_module('budgetdraft', run_name='__main__')"
)


@pytest.mark.parametrize("given", [None, "0"], ids=["unset", "turned-off"])
def test_the_command_line_and_the_probe_set_the_allocator_unless_the_environment_does(monkeypatch, given):
    env = {k: v for k, v in os.environ.items() if k not in CPU_ALLOCATOR_ENV}
    if given is not None:
        env.update(dict.fromkeys(CPU_ALLOCATOR_ENV, given))
    run = subprocess.run([sys.executable, "-c", SAYS_ENV], env=env, capture_output=True, text=True)
    expected = {name: given or value for name, value in CPU_ALLOCATOR_ENV.items()}
    assert run.stdout.strip().splitlines()[-1] == f"env {expected}", run.stdout + run.stderr
    for name in CPU_ALLOCATOR_ENV:
        monkeypatch.delenv(name, raising=False) if given is None else monkeypatch.setenv(name, given)
    assert {name: machine.package_env()[name] for name in CPU_ALLOCATOR_ENV} == expected
