"""OTP and erts version strings, read one way (issue 11): snapshots and trace headers carry them
as text ("25", "25.2.3", "13.1.5", "?" or nothing)."""

from __future__ import annotations

from beamalloc.flags import SUPPORTED_OTP

#: From OTP 23 on, erts N ships with OTP N + 12 (erts 13.1.5 is OTP 25.2.3).
ERTS_TO_OTP = 12
#: OTP 26.0 moved `instrument` from the tools application to runtime_tools (runtime_tools 2.0,
#: OTP-18487; docs/erts/releases.md §2).
INSTRUMENT_IN_RUNTIME_TOOLS = 26


def otp_major(release: object) -> int | None:
    """"25.2.3" -> 25; None when the text does not start with a number."""
    try:
        return int(str(release).split(".")[0])
    except ValueError:
        return None


def instrument_app(release: object) -> str:
    """The OTP application that ships `instrument` on a node of `release`: "tools" before OTP 26,
    "runtime_tools" from it, both named where the release is not known."""
    major = otp_major(release)
    if major is None:
        return "tools (OTP 21-25) or runtime_tools (OTP 26+)"
    return "runtime_tools" if major >= INSTRUMENT_IN_RUNTIME_TOOLS else "tools"


def modelled_otp(release: object) -> int:
    """The release whose defaults the flag grammar and the replay use: the node's own when it is
    modelled (flags.SUPPORTED_OTP), else 25."""
    major = otp_major(release)
    return major if major in SUPPORTED_OTP else 25


def nearest_modelled_otp(erts: tuple[int, ...] | None) -> int:
    """The modelled release nearest to the one an erts version ships with (flags.SUPPORTED_OTP):
    newer releases are read with the newest defaults modelled, older with the oldest; 25 when
    the version is not known."""
    if erts is None:
        return 25
    return min(max(erts[0] + ERTS_TO_OTP, SUPPORTED_OTP[0]), SUPPORTED_OTP[-1])


def erts_tuple(version: str | None) -> tuple[int, ...] | None:
    """"13.1.5" -> (13, 1, 5); None when absent or not numeric."""
    if not version:
        return None
    try:
        return tuple(int(x) for x in version.split("."))
    except ValueError:
        return None


def erts_of(erts_version: str | None, otp_release: object) -> tuple[int, ...] | None:
    """The erts version as a tuple; from the OTP major when only that is known."""
    erts = erts_tuple(erts_version)
    if erts is not None:
        return erts
    otp = otp_major(otp_release)
    if otp is None:
        return None
    if otp >= 23:
        return (otp - ERTS_TO_OTP, 0)
    return (10, 4) if otp == 22 else (10, 0) if otp == 21 else None
