"""The data plane's rollout: its phases, its one record in status, the health gate, the canary,
the rollback, the pure ``machine.step`` and the ``executor`` that acts on what it decides."""
