"""`python -m budgetdraft <command> ...`: the registry of the commands (``COMMANDS``, one module each with
`configure_parser(parser)` + `run(args)`, and optionally `preload(argv, models)`, what a forking warm process loads
for it before it forks the command), offered first to the warm process of a pipeline run
(`budgetdraft.pipeline.warm`), else run in this process (``run``). Modules are imported only when their command
runs, so `--help` and light commands start fast; the warm process runs a command it takes with ``run`` too.
"""

import argparse
import importlib
import sys

from budgetdraft.pipeline.warm import RESIDENT_COMMANDS

COMMANDS = {
    "export-model": (
        "budgetdraft.pipeline.commands.cmd_export_model",
        "materialise a verifier/drafter as a Hugging Face directory",
    ),
    "decode": (
        "budgetdraft.pipeline.commands.cmd_decode",
        "decode one prompt with AR or speculative decoding, print text + metrics",
    ),
    "prepare": (
        "budgetdraft.pipeline.commands.cmd_prepare",
        "tokenised prompts for one dataset x context, or the training sequences",
    ),
    "prefill": (
        "budgetdraft.pipeline.commands.cmd_prefill",
        "the verifier's prefill of each prompt, computed once for every grid cell",
    ),
    "targets": (
        "budgetdraft.pipeline.commands.cmd_targets",
        "verifier greedy teacher targets for the training sequences",
    ),
    "train": ("budgetdraft.pipeline.commands.cmd_train", "train a drafter with L_A + lambda * L_C"),
    "draft-vocab": (
        "budgetdraft.pipeline.commands.cmd_draft_vocab",
        "the most frequent tokens of training data: a reduced draft vocabulary",
    ),
    "eval-cell": (
        "budgetdraft.pipeline.commands.cmd_eval_cell",
        "run one evaluation grid cell and write its parquet file",
    ),
    "positions": (
        "budgetdraft.pipeline.commands.cmd_profile",
        "teacher-forced top-1 agreement of drafters with the verifier, by position",
    ),
    "paper": ("budgetdraft.pipeline.commands.cmd_paper", "build one table or figure of the paper from cell files"),
    "paper-diff": (
        "budgetdraft.pipeline.commands.cmd_paper_diff",
        "every value the paper reports beside this run's, within the authors' tolerance or not",
    ),
    "claims": (
        "budgetdraft.pipeline.commands.cmd_claims",
        "report which of the paper's findings hold in this run, with bootstrap intervals",
    ),
    "train-eagle3": ("budgetdraft.pipeline.commands.cmd_train_eagle3", "train the EAGLE-3 draft head baseline"),
    "warm": (
        "budgetdraft.pipeline.commands.cmd_warm",
        "serve pre-imported forks to the commands of a local pipeline run",
    ),
    "estimate": (
        "budgetdraft.pipeline.commands.cmd_estimate",
        "what a configuration will cost on a device, before it runs",
    ),
    "pin": (
        "budgetdraft.pipeline.commands.cmd_pin",
        "the hub commits of a config's models and datasets, as its `revisions:` block",
    ),
    "export-hf-generate": (
        "budgetdraft.pipeline.commands.cmd_export_hf_generate",
        "write custom_generate/ beside a drafter: publish it with its loop",
    ),
}
# every pipeline stage: the warm process saves each job its start-up (1-6 s of imports; budgetdraft.pipeline.warm)
WARM_COMMANDS = tuple(name for name in COMMANDS if name not in ("warm", "estimate", "pin", "export-hf-generate"))
# commands whose run(args, models) takes a warm process's models (budgetdraft.decoding.loading.ModelStore): the
# ones a resident server runs itself (budgetdraft.pipeline.warm.RESIDENT_COMMANDS, torch-free to import)


def main(argv: list[str] | None = None) -> None:
    """Run ``python -m budgetdraft ARGV``."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        build_parser().parse_args(argv)  # prints usage / the unknown-command error and exits
        return
    if argv[0] in WARM_COMMANDS:
        from budgetdraft.pipeline.warm import delegate

        status = delegate(argv)
        if status is not None:
            sys.exit(status)
    run(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="budgetdraft", description="One sub-command per pipeline stage.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_module, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def run(argv: list[str], models=None) -> None:
    """Run the command ``argv`` (its name first) in this process; ``models``: the ``ModelStore`` of the warm process
    running it, if one is. Bad input ends in one line naming the problem, no traceback, a non-zero exit
    (``error_text``)."""
    name, rest = argv[0], argv[1:]
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(prog=f"budgetdraft {name}", description=COMMANDS[name][1])
    module.configure_parser(parser)
    args = parser.parse_args(rest)
    try:
        module.run(args, models) if models is not None and name in RESIDENT_COMMANDS else module.run(args)
    except (ValueError, OSError) as err:
        sys.exit(f"budgetdraft {name}: error: {error_text(err)}")


def error_text(err: Exception) -> str:
    """The line for an error a user can fix: a ValueError's message (the library's own, naming a flag or key), an
    OSError's reason and path (a path that is missing, a directory, unreadable, on a full disk: about the
    machine, not a bug). Anything else is a bug and keeps its traceback."""
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        paths = f"{err.filename} -> {err.filename2}" if err.filename2 is not None else f"{err.filename}"
        return f"{paths}: {err.strerror}"
    if isinstance(err, OSError) and not err.strerror and type(err) in BARE_OS_ERRORS:  # pyarrow's: the path alone
        return f"{err}: {BARE_OS_ERRORS[type(err)]}"
    return str(err)


# OSErrors raised with the path as their only argument (pyarrow's FileNotFoundError('p')): what the path lacks
BARE_OS_ERRORS = {
    FileNotFoundError: "No such file or directory",
    IsADirectoryError: "Is a directory",
    PermissionError: "Permission denied",
}
