"""``kubectl linkerd-config``: ``plan``, ``status`` and ``convert`` as a kubectl plugin.

kubectl runs any ``kubectl-<name>`` executable on PATH for ``kubectl <name>`` (a dash in the
name is an underscore in the file name: ``kubectl-linkerd_config``), passing every argument
after the name, and asks ``kubectl_complete-linkerd_config`` for shell completion. The commands
are the ``linkerd-config`` command's own (cli.py); this module only speaks kubectl's dialect:
``-n/--namespace`` names Linkerd's namespace (the ConfigMaps' ``--config-namespace``), and
``--kubeconfig``, ``--context`` and ``-o json|yaml`` mean what they mean to kubectl.

Exit codes stay the command's: 0 nothing to do, 2 changes or stale, 1 error. ``kubectl diff``
uses 1 for changes; ``plan`` keeps Terraform's ``-detailed-exitcode`` convention (2), because
every other linkerd-config failure already exits 1 and a script must tell "would change" from
"could not tell".
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from linkerd_config import cli

PROG = "kubectl linkerd-config"
COMMANDS = ("plan", "status", "convert")
NAMESPACE_FLAGS = ("-n", "--namespace")

# What completion offers, per command: the flags kubectl users reach for first.
_COMMON = ("-n", "--namespace", "--kubeconfig", "--context", "-o", "--output")
_ROLLOUT = ("--max-restarts-per-pass", "--restart-interval", "--restart-namespace-selector")
FLAGS = {
    "plan": ("-f", "--filename", *_COMMON, *_ROLLOUT),
    "status": (*_COMMON, *_ROLLOUT),
    "convert": ("-f", "--filename", "--to"),
}
VALUES = {
    "-o": ("text", "json", "yaml"),
    "--output": ("text", "json", "yaml"),
    "--to": ("v1alpha2", "v1alpha1"),
}
# Cobra's completion directives, which kubectl reads from the last line.
NO_FILE_COMPLETION = 4
FILE_COMPLETION = 0


def translate(argv: Sequence[str]) -> list[str]:
    """kubectl's dialect to the ``linkerd-config`` command's: ``-n NS``, ``-nNS``,
    ``--namespace NS`` and ``--namespace=NS`` become ``--config-namespace NS``."""
    out: list[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        if arg in NAMESPACE_FLAGS and args:
            out += ["--config-namespace", args.pop(0)]
        elif arg.startswith("--namespace="):
            out += ["--config-namespace", arg.removeprefix("--namespace=")]
        elif arg.startswith("-n") and not arg.startswith("--") and len(arg) > 2:
            out += ["--config-namespace", arg[2:]]
        else:
            out.append(arg)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args if not a.startswith("-")), None)
    if command not in COMMANDS:
        if any(a in ("-h", "--help") for a in args) and command is None:
            print(
                f"usage: {PROG} {{{','.join(COMMANDS)}}} [-h] [-n LINKERD_NAMESPACE] "
                "[--kubeconfig FILE] [--context NAME] [-o text|json|yaml] ..."
            )
            return 0
        print(
            f"{PROG}: expected one of {', '.join(COMMANDS)}, got {command!r} "
            f"(see {PROG} <command> --help)",
            file=sys.stderr,
        )
        return 1
    try:
        return cli.main(translate(args), prog=PROG)
    except SystemExit as exc:  # argparse's usage errors: its own code (2) means "changes" here
        return 0 if exc.code in (0, None) else 1


def completions(args: Sequence[str]) -> tuple[list[str], int]:
    """What to offer for the last of ``args`` (the word being completed, maybe empty)."""
    *before, word = list(args) or [""]
    command = next((a for a in before if not a.startswith("-")), None)
    if command is None:
        return [c for c in COMMANDS if c.startswith(word)], NO_FILE_COMPLETION
    previous = before[-1] if before else ""
    if previous in ("-f", "--filename"):
        return [], FILE_COMPLETION
    if previous in VALUES:
        return [v for v in VALUES[previous] if v.startswith(word)], NO_FILE_COMPLETION
    if word.startswith("-"):
        return [f for f in FLAGS.get(command, ()) if f.startswith(word)], NO_FILE_COMPLETION
    return [], NO_FILE_COMPLETION


def complete(argv: Sequence[str] | None = None) -> int:
    """``kubectl_complete-linkerd_config``: cobra's protocol, as kubectl expects of plugins:
    one candidate per line, then ``:<directive>``."""
    found, directive = completions(sys.argv[1:] if argv is None else argv)
    sys.stdout.write("".join(f"{c}\n" for c in found) + f":{directive}\n")
    return 0
