from notee.cli import main

main()
