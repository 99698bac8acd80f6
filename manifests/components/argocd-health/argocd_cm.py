"""Write argocd-cm.yaml (the component's patch of Argo CD's argocd-cm) from health.lua:
``python manifests/components/argocd-health/argocd_cm.py`` (``make generate`` runs it)."""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
KEY = "resource.customizations.health.config.linkerd.io_LinkerdConfig"


def render(script: str) -> str:
    body = "".join(f"    {line}" if line.strip() else "\n" for line in script.splitlines(True))
    return (
        "# Generated from health.lua by `make generate`; a unit test keeps the two equal.\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: argocd-cm\n  namespace: argocd\n"
        f"data:\n  {KEY}: |\n{body}"
    )


if __name__ == "__main__":
    (HERE / "argocd-cm.yaml").write_text(render((HERE / "health.lua").read_text()))
