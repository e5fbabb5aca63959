"""A seeded, fault-injecting history checker of the ledger (see docs/architecture.md, "Torture").

``runner`` starts the sandbox, a throwaway PostgreSQL cluster (or a SQLite file), a webhook
receiver and the ``workload`` processes; ``faults`` draws the seed's schedule of faults;
``history`` is what every process appends to its own file; ``checker`` reads the histories
and the final state and reports each broken promise with the seed, the operations and times.
"""
