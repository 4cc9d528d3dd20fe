"""Tests against real BEAM nodes; a package so its conftest does not shadow tests/conftest."""
