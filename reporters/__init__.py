"""Reporters: the terminal renderings of analyze, recommend, replay and trace, the paste formats;
the static HTML report is htmlreport/ (above the web UI, whose templates it renders).
Stages compute; reporters only present what a stage returned (docs/architecture.md)."""
