"""The ``linkerd-config`` command: flags and environment in, one subcommand run."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

from linkerd_config import settings as settings_module


def _run(args: argparse.Namespace) -> int:
    # No garbage collection while the app is imported and built (it makes no garbage, and
    # collections would walk the new modules over and over): ``app.run`` freezes what it
    # made and turns collection back on.
    gc.disable()
    try:
        settings = settings_module.from_namespace(args)
    except settings_module.SettingsError as exc:
        print(f"linkerd-config run: {exc}", file=sys.stderr)
        return 2
    # Imported here so `--help` and the inspection commands stay quick.
    import asyncio  # noqa: PLC0415

    from linkerd_config.kube.tls import (  # noqa: PLC0415
        import_aiohttp_lean,
        small_tls_read_buffers,
    )

    import_aiohttp_lean()
    small_tls_read_buffers()
    from linkerd_config.app import run  # noqa: PLC0415
    from linkerd_config.kube.kubeconfig import AccessError  # noqa: PLC0415
    from linkerd_config.logs import configure_logging  # noqa: PLC0415

    configure_logging(settings.log_level, settings.log_format)
    try:
        return asyncio.run(run(settings))
    except AccessError as exc:
        print(f"linkerd-config run: {exc}", file=sys.stderr)
        return 1


def _inspect(args: argparse.Namespace) -> int:
    """``plan`` and ``status``: the settings they share with ``run``, then the command."""
    try:
        settings = settings_module.from_namespace(args, only=INSPECT_SETTINGS)
    except settings_module.SettingsError as exc:
        print(f"linkerd-config {args.command}: {exc}", file=sys.stderr)
        return 1
    from linkerd_config.kube.tls import import_aiohttp_lean  # noqa: PLC0415

    import_aiohttp_lean()
    from linkerd_config import inspection  # noqa: PLC0415
    from linkerd_config.logs import configure_logging  # noqa: PLC0415

    configure_logging("error", "console")  # the answer is on stdout; only failures on stderr
    if args.command == "plan":
        return inspection.plan_command(settings, args.filename, args.output)
    return inspection.status_command(settings, args.output)


def _check(args: argparse.Namespace) -> int:
    """``check``: as ``linkerd check`` runs an extension's (its flags, ``--output=json``)."""
    namespace = args.linkerd_namespace
    argv = [f"--namespace={namespace}", f"--config-namespace={namespace}"]
    argv += [f"--kubeconfig={args.kubeconfig}"] if args.kubeconfig else []
    argv += [f"--context={args.context}"] if args.context else []
    try:
        settings = settings_module.parse(argv)
    except settings_module.SettingsError as exc:
        print(f"linkerd-config check: {exc}", file=sys.stderr)
        return 1
    from linkerd_config import extension  # noqa: PLC0415
    from linkerd_config.logs import configure_logging  # noqa: PLC0415

    configure_logging("error", "console")
    return extension.check_command(settings, args)


def _extension_metadata(_args: argparse.Namespace) -> int:
    from linkerd_config import extension  # noqa: PLC0415

    return extension.metadata_command()


def _convert(args: argparse.Namespace) -> int:
    from linkerd_config import inspection  # noqa: PLC0415

    return inspection.convert_command(args.filename, args.to)


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error exits 1, not 2: 2 is what ``plan`` and ``status`` answer
    for "changes" (issue 39, finding 6), and every other failure of every command is 1."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE_ERROR, f"{self.prog}: error: {message}\n")


USAGE_ERROR = 1


def build_parser(prog: str = "linkerd-config") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        description="Declarative Linkerd configuration: reconcile LinkerdConfig objects into "
        "the linkerd-config ConfigMap and roll the data plane.",
    )
    parser.add_argument("--version", action=_VersionAction, nargs=0, help="print the version")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser(
        "run",
        help="run the controller (and its webhooks) against the current cluster",
        description="Run the controller. Each flag can also be set by the environment "
        "variable named in its help; a flag wins over the variable.",
    )
    settings_module.add_arguments(run)
    run.set_defaults(func=_run)

    plan = sub.add_parser(
        "plan",
        help="show what applying a LinkerdConfig would change and restart; writes nothing",
        description="Show what applying a LinkerdConfig would do in the current cluster, "
        "decided by the controller's own code: the webhook's validation, the change to each "
        "managed ConfigMap key (parsed, path by path), the workloads restarted, by pass, each "
        "with why, and the opted-in workloads not restarted, with why. Writes nothing.",
        epilog="exit status: 0 no change, 2 changes, 1 error (invalid, unreachable cluster)",
    )
    plan.add_argument("-f", "--filename", required=True, help="the LinkerdConfig (- for stdin)")
    _inspect_arguments(plan)
    status = sub.add_parser(
        "status",
        help="the data plane against the configuration in the cluster; exit 2 when stale",
        description="Every LinkerdConfig against the cluster: whether its ConfigMaps hold "
        "what it says, opted-in pods up to date / stale / pinned / excluded per namespace, "
        "the stale workloads with why, its conditions and its last rollout.",
        epilog="exit status: 0 all up to date and Ready, 2 something stale or failing, 1 error",
    )
    _inspect_arguments(status)
    convert = sub.add_parser(
        "convert",
        help="print a LinkerdConfig in another API version (v1alpha1 <-> v1alpha2); offline",
        description="Print the LinkerdConfig in FILE as the given API version, converted as "
        "the controller's conversion webhook converts it (losslessly: what v1alpha1 has no "
        "field for travels in the annotation config.linkerd.io/v1alpha2-values). For a "
        "cluster whose API server cannot call the webhook (webhooks off), which stores only "
        "v1alpha2: linkerd-config convert -f old.yaml | kubectl apply -f -",
        epilog="exit status: 0 converted, 1 error (unreadable, not one LinkerdConfig)",
    )
    convert.add_argument("-f", "--filename", required=True, help="the LinkerdConfig (- for stdin)")
    convert.add_argument(
        "--to", choices=["v1alpha2", "v1alpha1"], default="v1alpha2", help="default v1alpha2"
    )
    convert.set_defaults(func=_convert)

    check = sub.add_parser(
        "check",
        help="Linkerd's check, for this controller (linkerd check runs it); exit 1 on an error",
        description="The controller's health as `linkerd check` shows an extension's: the CRD "
        "and its versions, one leader, the controller's pods, the webhooks (registered, a "
        "valid caBundle, answering), and for each LinkerdConfig its ConfigMaps, its rollout "
        "(not halted, not rolled back), its data plane, trust-anchor holds and Ready. "
        "Category linkerd-config-controller. Takes the flags `linkerd check` passes.",
        epilog="exit status: 0 no error (warnings allowed), 1 an error",
    )
    check.add_argument("--kubeconfig", help="the kubeconfig (default: as kubectl finds it)")
    check.add_argument("--context", help="the kubeconfig context")
    check.add_argument(
        "-L", "--linkerd-namespace", default="linkerd",
        help="Linkerd's namespace: the controller's Lease, pods and ConfigMaps (default linkerd)",
    )  # fmt: skip
    check.add_argument(
        "-o", "--output", choices=["table", "json"], default="table", help="default table"
    )
    check.add_argument("--as", dest="as_user", help="impersonation: not supported")
    check.add_argument("--as-group", dest="as_group", action="append", help=argparse.SUPPRESS)
    for ignored in ("--api-addr", "--namespace", "--verbose", "--proxy", "--wait"):
        check.add_argument(ignored, help=argparse.SUPPRESS)  # linkerd check's, not ours
    check.set_defaults(func=_check)

    metadata = sub.add_parser(
        "_extension-metadata",
        help="for Linkerd's CLI: this extension's name, and that linkerd check runs it",
    )
    metadata.set_defaults(func=_extension_metadata)

    return parser


INSPECT_SETTINGS = (
    "kubeconfig",
    "context",
    "config_namespace",
    "max_restarts_per_pass",
    "restart_interval",
    "restart_namespaces",
)
"""The ``run`` settings ``plan`` and ``status`` take too: where to look, and the rollout
defaults a LinkerdConfig's ``spec.rollout`` may override (give the controller's values)."""


def _inspect_arguments(parser: argparse.ArgumentParser) -> None:
    settings_module.add_arguments(parser, only=INSPECT_SETTINGS)
    parser.add_argument(
        "-o", "--output", choices=["text", "json", "yaml"], default="text", help="default text"
    )
    parser.set_defaults(func=_inspect)


class _VersionAction(argparse.Action):
    """``--version``, looked up only when asked (importlib.metadata costs every start 25 ms)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"linkerd-config {_version()}")
        parser.exit()


def _version() -> str:
    from importlib import metadata  # noqa: PLC0415

    try:
        return metadata.version("linkerd-config")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def main(argv: Sequence[str] | None = None, prog: str = "linkerd-config") -> int:
    args = build_parser(prog).parse_args(argv)
    code: int = args.func(args)
    return code
