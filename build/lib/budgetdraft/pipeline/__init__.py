"""The pipeline's plumbing, on top of every other layer: the command line (``cli``), the workflow's plan of a
config (``plan``), the config checks (``configcheck``), warm and resident processes (``warm``) and the cost
estimate (``estimate``)."""
