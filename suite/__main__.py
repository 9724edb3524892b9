from suite.cli.main import main

main()
