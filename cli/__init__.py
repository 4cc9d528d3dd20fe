"""The app layer: the `beamalloc` command (cli/main.py builds the parser and runs a command) and
the demo. Nothing below this package imports it (docs/architecture.md)."""

from beamalloc.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
