"""The bottom layer: what every other layer shares and that needs none of them. Cell labels and artifact names
(``names``, read by the workflow too), the cache folder (``cache``), defaults with one home each (``defaults``), writes that appear whole
(``atomic``), JSON in and out (``jsonio``), text a user gives (``text``), hub revisions (``revisions``) and which
modules a command runs (``importgraph``). Imports nothing of budgetdraft outside this folder."""
