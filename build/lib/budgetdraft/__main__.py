import os

from budgetdraft.base.defaults import with_cpu_allocator

with_cpu_allocator(os.environ)  # before anything imports torch (base.defaults: huge pages)

from budgetdraft.pipeline.cli import main  # noqa: E402

main()
