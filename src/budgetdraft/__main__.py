from budgetdraft.cli import main

main()
