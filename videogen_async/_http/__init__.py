"""_http: see docs/architecture.md."""
