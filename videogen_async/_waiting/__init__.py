"""_waiting: see docs/architecture.md."""
