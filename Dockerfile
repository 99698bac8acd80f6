# syntax=docker/dockerfile:1
#
# linkerd-config controller image: build the wheel, install it with its dependencies into
# a virtualenv on a slim runtime, run as the non-root user 65532.
#
#   docker build -t linkerd-config:latest .
#
# The base is pinned by its full version tag. Pin it by digest as well
# (python:3.11.13-slim-bookworm@sha256:...) once the digest is checked against the registry:
# there is no Docker engine where this file was written, so no digest could be verified
# here, and an unverified digest would be worse than none.
ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm

# -- build: the project's wheel only (its dependencies are resolved in the runtime stage) ----
FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY linkerd_config ./linkerd_config
RUN pip wheel --no-deps --wheel-dir /wheels .

# -- runtime ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/linkerd-config \
    PATH=/opt/linkerd-config/bin:$PATH
# Every dependency ships manylinux wheels for CPython 3.11 (cryptography, orjson, protobuf,
# aiohttp, ...): no compiler is needed, and --only-binary makes sure none is attempted.
# Bytecode is compiled now, because the root filesystem is read-only at run time.
# Dependencies come from the lock file, every one pinned and hash-checked; the project's own
# wheel is added without resolving anything.
COPY requirements/runtime.lock /tmp/runtime.lock
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    python -m venv "$VIRTUAL_ENV" \
    && "$VIRTUAL_ENV/bin/pip" install --only-binary=:all: --require-hashes -r /tmp/runtime.lock \
    && "$VIRTUAL_ENV/bin/pip" install --no-deps /wheels/*.whl \
    && rm /tmp/runtime.lock \
    && "$VIRTUAL_ENV/bin/python" -m compileall -q "$VIRTUAL_ENV/lib" \
    && groupadd --system --gid 65532 nonroot \
    && useradd --system --uid 65532 --gid 65532 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin nonroot \
    && linkerd-config --help >/dev/null
# Numeric, so the kubelet can verify runAsNonRoot without reading /etc/passwd.
USER 65532:65532
WORKDIR /tmp
# webhook (HTTPS), metrics, health probes
EXPOSE 9443 8080 8081
ENTRYPOINT ["linkerd-config"]
CMD ["run"]
