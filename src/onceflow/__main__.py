from onceflow.cli.main import main

main()
