"""One module per `beamalloc` subcommand (as memray's commands/): each has `add_parser(sub)`,
which builds its parser and sets `run` as its default, and `run(args, ctx) -> int`. A module
imports at its top only what its parser needs; `run` imports the stages it runs, so a command
pays for what it runs (tests/bench/bench_startup.py). cli/main.py's COMMANDS lists them, in the
order `beamalloc --help` shows them."""
