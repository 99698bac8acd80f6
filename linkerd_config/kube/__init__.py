"""The controller machinery: knows Kubernetes, never Linkerd."""
