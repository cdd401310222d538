"""`python -m budgetdraft pin`: the hub commits of a config's models and datasets, printed as its `revisions:` block
(``budgetdraft.base.revisions``)."""


def configure_parser(parser) -> None:
    parser.add_argument("--configfile", required=True, help="the pipeline config whose hub repositories to pin")


def run(args) -> None:
    import yaml

    from budgetdraft.base.revisions import pinned_block

    with open(args.configfile) as f:
        try:
            cfg = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise ValueError(f"{args.configfile}: not YAML ({' '.join(str(err).split())})") from None
    if not isinstance(cfg, dict):
        held = "nothing" if cfg is None else f"a {type(cfg).__name__}"
        raise ValueError(f"{args.configfile}: holds {held}, not a pipeline config (a mapping of its settings)")
    text = pinned_block(cfg)
    if text is None:
        print(f"{args.configfile} reads no hub repository: nothing to pin")
        return
    print(text, end="")
