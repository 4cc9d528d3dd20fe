"""Reporters: the terminal renderings of analyze, recommend, replay and trace, the paste formats
and the static HTML report (html.py, which sits above the web UI whose templates it renders).
Stages compute; reporters only present what a stage returned (docs/architecture.md)."""
