import os

from budgetdraft.base.defaults import CPU_ALLOCATOR_ENV

for name, value in CPU_ALLOCATOR_ENV.items():  # before anything imports torch (base.defaults: huge pages)
    os.environ.setdefault(name, value)

from budgetdraft.pipeline.cli import main  # noqa: E402

main()
