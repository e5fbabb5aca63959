"""_resources: see docs/architecture.md."""
