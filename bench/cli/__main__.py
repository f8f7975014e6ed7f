"""`python -m bench.cli ARGS`: the `bench` command."""

from bench.cli import main

main()
