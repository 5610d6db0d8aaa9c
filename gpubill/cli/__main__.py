"""`python -m gpubill.cli`: the same as the `gpubill` command."""

from gpubill.cli import main

main()
