"""`python -m budgetdraft pin`: the hub commits of a config's models and datasets, printed as its `revisions:` block
(``budgetdraft.base.revisions``)."""


def configure_parser(parser) -> None:
    parser.add_argument("--configfile", required=True, help="the pipeline config whose hub repositories to pin")


def run(args) -> None:
    import yaml

    from budgetdraft.base.revisions import pinned_block

    with open(args.configfile) as f:
        text = pinned_block(yaml.safe_load(f))
    if text is None:
        print(f"{args.configfile} reads no hub repository: nothing to pin")
        return
    print(text, end="")
