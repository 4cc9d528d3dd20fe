"""Why a trace cannot run: one line for the user, exit code 2 (beamalloc/errors.py)."""

from beamalloc.errors import InputError


class EbpfUnavailable(InputError):
    """Not root, no BPF, no kernel headers, no bcc, or a BEAM without the exported symbols."""
