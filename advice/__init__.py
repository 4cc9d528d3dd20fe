"""The advice layer: findings, rules, lint, predictions (they replay), the
recommendation, its records and wording, the holders' judgement, diff
(docs/architecture.md)."""
