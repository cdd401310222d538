from budgetdraft.pipeline.cli import main

main()
