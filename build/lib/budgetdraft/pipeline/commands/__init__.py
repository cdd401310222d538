"""The commands of `python -m budgetdraft`, one module each (``cmd_<command>``: ``configure_parser(parser)`` adds its
flags, ``run(args)`` reads them and calls the library), and the flags several commands share (``flags``). The
library's modules expose functions, never a parser. The registry that maps a command to its module is
``budgetdraft.pipeline.cli.COMMANDS``; this package imports nothing, so a command's module brings in only what it
runs (``budgetdraft.base.importgraph``)."""
