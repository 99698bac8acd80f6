"""Declarative Linkerd configuration controller."""
