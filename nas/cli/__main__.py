"""`python -m nas.cli`: the `nas` console script."""

from .commands import main

main()
