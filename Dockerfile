# syntax=docker/dockerfile:1
#
# One image for every kubeopera-tenants function. It runs
#   gunicorn -c python:functions.gunicorn_conf <app>
# and the Knative Service chooses the function with the app argument, e.g.
#   docker run --read-only --tmpfs /tmp -p 8080:8080 IMAGE 'functions.install:create_app()'
# (deploy/base/services/*.yaml; tests/deploy/test_start_command.py runs that exact command
# against the installed package for every Service).
#
# Build with BuildKit (docker buildx build, or docker build on Docker >= 23), which sets
# TARGETARCH: linux/amd64 and linux/arm64 are supported.

# Python 3.11 on Debian 12, pinned by tag and digest (refresh both together).
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm@sha256:081075da77b2b55c23c088251026fb69a7b2bf92471e491ff5fd75c192fd38e5

# --- the runtime wheel (pure Python: built once, on the builder's own platform) -------------
# Only shared/ and functions/ go in (pyproject.toml's packages); the test bed is a separate
# distribution (testbed/pyproject.toml) that never reaches the image.
FROM --platform=$BUILDPLATFORM ${PYTHON_IMAGE} AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY shared ./shared
COPY functions ./functions
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- helm v3.16.4, checked against its published SHA-256 ------------------------------------
FROM ${PYTHON_IMAGE} AS helm
ARG TARGETARCH
ARG HELM_VERSION=v3.16.4
# From the v3.16.4 release notes (get.helm.sh/helm-v3.16.4-linux-<arch>.tar.gz.sha256sum).
ARG HELM_SHA256_AMD64=fc307327959aa38ed8f9f7e66d45492bb022a66c3e5da6063958254b9767d179
ARG HELM_SHA256_ARM64=d3f8f15b3d9ec8c8678fbf3280c3e5902efabe5912e2f9fcf29107efbc8ead69
ADD https://get.helm.sh/helm-${HELM_VERSION}-linux-${TARGETARCH}.tar.gz /tmp/helm.tar.gz
RUN set -eu; \
    case "${TARGETARCH}" in \
      amd64) sum="${HELM_SHA256_AMD64}" ;; \
      arm64) sum="${HELM_SHA256_ARM64}" ;; \
      *) echo "no helm checksum for architecture '${TARGETARCH}'" >&2; exit 1 ;; \
    esac; \
    echo "${sum}  /tmp/helm.tar.gz" | sha256sum -c -; \
    tar -xzf /tmp/helm.tar.gz -C /tmp "linux-${TARGETARCH}/helm"; \
    install -m 0755 "/tmp/linux-${TARGETARCH}/helm" /usr/local/bin/helm

# --- the image ------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE}
# helm's folders and the pinned chart's cache are set here only, for every function: under
# /var/lib/kubeopera/helm, which the Services mount as an emptyDir (the root is read-only).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HOME=/home/app \
    PORT=8080 \
    HELM_CACHE_HOME=/var/lib/kubeopera/helm/cache \
    HELM_CONFIG_HOME=/var/lib/kubeopera/helm/config \
    HELM_DATA_HOME=/var/lib/kubeopera/helm/data \
    CHART_CACHE_DIR=/var/lib/kubeopera/helm/charts
COPY --from=helm /usr/local/bin/helm /usr/local/bin/helm
# The dependencies are resolved here, for the target platform (some have native wheels).
RUN --mount=type=bind,from=wheel,source=/wheels,target=/wheels \
    python -m pip install --no-cache-dir /wheels/kubeopera_tenants-*.whl \
    && groupadd --gid 65532 app \
    && useradd --uid 65532 --gid 65532 --home-dir /home/app --create-home --shell /usr/sbin/nologin app \
    && install -d -o 65532 -g 65532 /var/lib/kubeopera/helm
# Not the source tree: the functions are imported from the installed package only.
WORKDIR /home/app
# Numeric, so that Kubernetes can verify runAsNonRoot.
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["gunicorn", "-c", "python:functions.gunicorn_conf"]
