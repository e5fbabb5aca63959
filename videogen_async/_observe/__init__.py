"""_observe: see docs/architecture.md."""
