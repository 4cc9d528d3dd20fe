"""Reporters: the terminal renderings of analyze, recommend and replay and the paste formats.
Stages compute; reporters only present what a stage returned (docs/architecture.md)."""
