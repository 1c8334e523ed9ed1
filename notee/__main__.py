from notee.cli.main import main

main()
