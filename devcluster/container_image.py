"""The controller image, built with docker or podman: ``make docker-build`` / ``docker-push``
and, where no container registry is reachable, ``make docker-build-local``, whose base image
is made here from Debian's packages with mmdebstrap (cached in the tool's image store).

CLI, for the Makefile: ``python -m devcluster.container_image CMD``

- ``tool``: print the container tool (``CONTAINER_TOOL``, else docker when its engine
  answers, else podman);
- ``build IMG [--python-image IMAGE]``, ``push IMG``: run the tool's build / push;
- ``base``: make the local base image unless the tool has it already; print its name.

podman as root on a machine that may not raise resource limits (no ``CAP_SYS_RESOURCE``, as
in a Firecracker VM) fails every container it starts, ``RUN`` steps included, because it
asks for 1048576 open files. There, and only when ``CONTAINERS_CONF`` is not
set already, podman is pointed at a ``containers.conf`` written under the cache directory
that asks for no more than the machine allows (:func:`tool_env`). Images go to the tool's
default store (podman's root store is /var/lib/containers/storage), so ``podman save`` or
``docker save`` find them afterwards.
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from devcluster.binaries import Progress, build_lock, cache_root

LOCAL_BASE = "localhost/linkerd-config-python:3.11-bookworm"
"""The base ``docker-build-local`` makes: Debian bookworm's Python (3.11), as the published
base ``python:3.11.13-slim-bookworm`` (the Dockerfile's default) is Debian bookworm too."""
DEBIAN_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python-is-python3", "ca-certificates")
BASE_ENV = (
    # Without PATH the Dockerfile's PATH=/opt/...:$PATH keeps only /opt/... (an imported
    # tarball has no environment), and groupadd in /usr/sbin is not found.
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "LANG=C.UTF-8",
)
HOST_CA_DIR = Path("/usr/local/share/ca-certificates")
"""The host's own CA certificates (a TLS-inspecting proxy's, say): copied into the base, so
pip in the build trusts what the host trusts."""

PODMAN_ROOT_RLIMIT = 1048576
"""The open files podman asks for as root unless configured (and the processes, where
kernel.pid_max does not lower that)."""
CAP_SYS_RESOURCE = 24
TOOL_PROBE_TIMEOUT = 30.0


class ContainerToolError(RuntimeError):
    """No tool to build or run images with, or something it needs is missing; the message
    says what."""


def run_command(
    cmd: Sequence[str],
    env: Mapping[str, str] | None = None,
    progress: Progress | None = None,
) -> None:
    """Run a command, shown first (with the environment it is given beyond ours). Its
    output goes to stderr: stdout is the CLI's answer (``base`` prints the image's name)."""
    if progress is not None:
        extra = [f"{k}={v}" for k, v in (env or {}).items() if os.environ.get(k) != v]
        progress("+ " + shlex.join([*extra, *cmd]))
    sys.stdout.flush()
    result = subprocess.run(
        list(cmd), env=None if env is None else dict(env), stdout=sys.stderr, check=False
    )
    if result.returncode != 0:
        raise ContainerToolError(f"{shlex.join(cmd[:2])} failed (exit {result.returncode})")


def is_podman(tool: str) -> bool:
    return Path(tool).name == "podman"


def container_tool(explicit: str | None = None) -> str:
    """``explicit`` (or ``$CONTAINER_TOOL``) if on PATH; else docker when ``docker info``
    succeeds; else podman when installed."""
    chosen = explicit if explicit is not None else os.environ.get("CONTAINER_TOOL", "")
    if chosen:
        if shutil.which(chosen) is None:
            raise ContainerToolError(f"CONTAINER_TOOL={chosen}: not found on PATH")
        return chosen
    if shutil.which("docker") is not None:
        try:
            info = subprocess.run(
                ["docker", "info"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                timeout=TOOL_PROBE_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            pass
        else:
            if info.returncode == 0:
                return "docker"
    if shutil.which("podman") is not None:
        return "podman"
    raise ContainerToolError(
        "no container tool: needs docker (with a running Docker engine) or podman "
        "(Debian: apt-get install podman buildah runc); CONTAINER_TOOL=... chooses one"
    )


def _effective_capabilities() -> int:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def _hard_limit(which: int) -> int:
    hard = resource.getrlimit(which)[1]
    return PODMAN_ROOT_RLIMIT if hard == resource.RLIM_INFINITY else min(hard, PODMAN_ROOT_RLIMIT)


def _pid_max() -> int:
    try:
        return int(Path("/proc/sys/kernel/pid_max").read_text())
    except (OSError, ValueError):
        return PODMAN_ROOT_RLIMIT


def _podman_limits() -> tuple[int, int]:
    """(nofile, nproc) podman as root can give a container here. podman lowers its own
    RLIMIT_NPROC to kernel.pid_max when it starts (containers/common's
    GetDefaultProcessLimits), and a container cannot be given more than podman has."""
    nofile = _hard_limit(resource.RLIMIT_NOFILE)
    nproc = min(_hard_limit(resource.RLIMIT_NPROC), _pid_max())
    return nofile, nproc


def podman_needs_conf() -> bool:
    """Root podman would ask for more open files (1048576) or processes (kernel.pid_max)
    than this machine lets it have: every container, RUN steps included, fails to start
    ("error setting rlimit type 7: operation not permitted")."""
    if os.geteuid() != 0 or _effective_capabilities() & (1 << CAP_SYS_RESOURCE):
        return False  # rootless podman keeps the current limits; CAP_SYS_RESOURCE may raise
    nofile, nproc = _podman_limits()
    return nofile < PODMAN_ROOT_RLIMIT or nproc < min(_pid_max(), PODMAN_ROOT_RLIMIT)


def podman_conf_text() -> str:
    """Limits within the machine's; runc (crun refuses cgroups v1 in hybrid mode, as on a
    Firecracker VM) when installed; cgroupfs (no systemd to ask there)."""
    nofile, nproc = _podman_limits()
    lines = [
        "# Written by devcluster.container_image for podman on this machine,",
        "# which may not raise resource limits. Used only while CONTAINERS_CONF is unset.",
        "[containers]",
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc={nproc}:{nproc}"]',
        "",
        "[engine]",
        'cgroup_manager = "cgroupfs"',
    ]
    if shutil.which("runc") is not None:
        lines.append('runtime = "runc"')
    return "\n".join(lines) + "\n"


def tool_env(tool: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment to run ``tool`` in: ours, plus ``CONTAINERS_CONF`` for podman when
    :func:`podman_needs_conf` and the user has not set one."""
    env = dict(os.environ if environ is None else environ)
    if is_podman(tool) and not env.get("CONTAINERS_CONF") and podman_needs_conf():
        path = cache_root() / "podman" / "containers.conf"
        text = podman_conf_text()
        if not path.is_file() or path.read_text() != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".tmp{os.getpid()}")
            tmp.write_text(text)
            tmp.replace(path)
        env["CONTAINERS_CONF"] = str(path)
    return env


def image_exists(tool: str, image: str) -> bool:
    result = subprocess.run(
        [tool, "image", "inspect", image],
        env=tool_env(tool),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return result.returncode == 0


def build_command(tool: str, image: str, python_image: str = "") -> list[str]:
    cmd = [tool, "build", "-t", image]
    if python_image:
        cmd += ["--build-arg", f"PYTHON_IMAGE={python_image}"]
    if is_podman(tool):
        # Buildah 1.28 (Debian bookworm's podman 4.3): with the build stage cached, the
        # runtime stage's RUN --mount=type=bind,from=build mounts an empty folder
        # ("*.whl is not a valid wheel filename"). Fixed in buildah 1.29; until then no
        # layer cache.
        cmd.append("--layers=false")
        if python_image.startswith("localhost/"):
            cmd.append("--pull=never")  # a local image: no registry to ask
    return [*cmd, "."]


def build(
    image: str, python_image: str = "", tool: str | None = None, progress: Progress = print
) -> None:
    """Build the Dockerfile in the current folder (the repository's root) as ``image``."""
    chosen = container_tool(tool)
    try:
        run_command(build_command(chosen, image, python_image), tool_env(chosen), progress)
    except ContainerToolError as exc:
        if python_image.startswith("localhost/"):
            raise
        # The usual cause on a machine with no registry: the published base cannot be pulled.
        raise ContainerToolError(
            f"{exc}; if the base image ({python_image or 'the Dockerfile default'}) cannot be "
            "pulled here, `make docker-build-local` builds one from Debian's packages"
        ) from None


def push(image: str, tool: str | None = None, progress: Progress = print) -> None:
    chosen = container_tool(tool)
    run_command([chosen, "push", image], tool_env(chosen), progress)


def mmdebstrap_command(
    target: Path,
    ca_dir: Path = HOST_CA_DIR,
    packages: Sequence[str] = BASE_PACKAGES,
    options: Sequence[str] = (),
) -> list[str]:
    """Debian's minbase with ``packages`` (which must include ca-certificates when the host
    has CA certificates of its own, copied in). mmdebstrap picks its output's format from
    ``target``'s name (``.tar``: a tarball; no suffix it knows: a folder)."""
    certs = sorted(str(p) for p in ca_dir.glob("*.crt")) if ca_dir.is_dir() else []
    cmd = [
        "mmdebstrap",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        *options,
    ]
    if certs:
        cmd += [
            f"--customize-hook=copy-in {shlex.join(certs)} /usr/local/share/ca-certificates/",
            '--customize-hook=chroot "$1" update-ca-certificates',
        ]
    return [*cmd, DEBIAN_SUITE, str(target)]


def ensure_base(tool: str | None = None, progress: Progress = print) -> str:
    """:data:`LOCAL_BASE` in the tool's image store, made unless it is there already."""
    chosen = container_tool(tool)
    if image_exists(chosen, LOCAL_BASE):
        return LOCAL_BASE
    if shutil.which("mmdebstrap") is None:
        raise ContainerToolError(
            f"cannot make the local base image {LOCAL_BASE}: needs mmdebstrap "
            "(Debian: apt-get install mmdebstrap)"
        )
    with build_lock("container-base"):
        if image_exists(chosen, LOCAL_BASE):
            return LOCAL_BASE  # another process made it meanwhile
        work = cache_root() / "container-base"
        work.mkdir(parents=True, exist_ok=True)
        tarball = work / f"{DEBIAN_SUITE}.tar"
        progress(f"making the base image {LOCAL_BASE} from Debian {DEBIAN_SUITE} (about a minute)")
        start = time.monotonic()
        try:
            run_command(mmdebstrap_command(tarball), progress=progress)
            changes = [arg for env in BASE_ENV for arg in ("--change", f"ENV {env}")]
            run_command(
                [chosen, "import", *changes, str(tarball), LOCAL_BASE],
                tool_env(chosen),
                progress,
            )
        finally:
            tarball.unlink(missing_ok=True)
        progress(f"made {LOCAL_BASE} in {time.monotonic() - start:.0f} s")
    return LOCAL_BASE


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.container_image")
    parser.add_argument("--tool", default=None, help="docker or podman (default: detected)")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("tool", help="print the container tool")
    commands.add_parser("base", help="make the local base image if absent; print its name")
    build_parser = commands.add_parser("build", help="build the controller image")
    build_parser.add_argument("image")
    build_parser.add_argument("--python-image", default="")
    push_parser = commands.add_parser("push", help="push the image")
    push_parser.add_argument("image")
    args = parser.parse_args(argv)
    tool = args.tool or None  # the Makefile passes an empty CONTAINER_TOOL as ''

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    try:
        if args.command == "tool":
            print(container_tool(tool))
        elif args.command == "base":
            print(ensure_base(tool, progress))
        elif args.command == "build":
            build(args.image, args.python_image, tool, progress=progress)
        else:
            push(args.image, tool, progress)
    except ContainerToolError as error:
        print(f"container_image {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
