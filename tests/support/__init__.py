"""Test support code: helpers, the scenario, the demo (never imported by the controller)."""
