"""_contract: see docs/architecture.md."""
