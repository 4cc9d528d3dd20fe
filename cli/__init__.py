"""The app layer: the `beamalloc` command (cli/main.py: the top parser, dispatch and the error
boundary; cli/commands/: one module per subcommand) and the demo. Nothing below this package
imports it (docs/architecture.md)."""

from beamalloc.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
