"""The two kinds of failure a user sees (docs/design.md, "Conventions": exit codes)."""


class InputError(ValueError):
    """Bad input or usage: one clear line on stderr, exit code 2."""

    exit_code = 2


class NodeUnavailable(RuntimeError):
    """The node is unreachable, rejected us, died or stalled: one line, exit code 3."""

    exit_code = 3
