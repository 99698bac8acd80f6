"""Test support code: helpers and stand-ins (never imported by the controller)."""
