"""The Linkerd domain: knows Linkerd, never HTTP or watches."""
