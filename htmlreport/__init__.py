"""The static HTML report: one file rendered from the web UI's templates,
figures and page data, so it sits above webui/ (docs/architecture.md)."""
