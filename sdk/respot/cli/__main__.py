"""`python -m respot.cli`: the same as the `respot` command."""

from respot.cli import main

main()
