"""beamalloc/versions.py: the erts <-> OTP correspondence is written once and read both ways."""

from __future__ import annotations

from beamalloc.flags import SUPPORTED_OTP
from beamalloc.versions import erts_of, instrument_app, modelled_otp, nearest_modelled_otp


def test_erts_and_otp_round_trip_over_the_modelled_releases() -> None:
    for otp in SUPPORTED_OTP:
        erts = erts_of(None, f"{otp}.1")
        assert nearest_modelled_otp(erts) == otp == modelled_otp(f"{otp}.1")
    assert erts_of("13.1.5", "25") == (13, 1, 5)  # the node's own erts wins


def test_releases_outside_the_model_take_the_nearest_modelled_one() -> None:
    assert nearest_modelled_otp(erts_of(None, "23")) == min(SUPPORTED_OTP)
    assert nearest_modelled_otp(erts_of(None, "30")) == max(SUPPORTED_OTP)
    assert nearest_modelled_otp(None) == 25
    # The replay's rule (modelled_otp) is another: a release it does not model replays as 25.
    assert modelled_otp("30") == 25


def test_instrument_moved_to_runtime_tools_in_otp_26() -> None:
    """docs/erts/releases.md §2 (OTP-18487); tests/live/test_carriers_live.py checks it on the
    nodes of each test release."""
    assert instrument_app("25") == instrument_app("21.3") == "tools"
    assert instrument_app("26") == instrument_app("29.1.1") == "runtime_tools"
    assert "tools" in instrument_app("?") and "runtime_tools" in instrument_app(None)
