# The resnas image: the `nas` CLI, a Ray node and the dashboard, for every service of
# docker-compose.yml.
#
# CUDA: PyPI's Linux torch wheels are CUDA builds that carry their own CUDA runtime libraries; the
# GPU driver comes from the host through the NVIDIA container toolkit. So the default image runs on
# GPUs and on CPUs alike. For CPU-only hosts a much smaller image:
#   docker compose build --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# (or set TORCH_INDEX_URL in .env).
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

# Inside the project's range (pyproject: torch>=2.7,<2.15); the version CI tests with.
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://pypi.org/simple

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    RAY_USAGE_STATS_ENABLED=0

# Triton compiles its kernel launchers with the system C compiler at run time.
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*

# torch first, from the chosen index, so that the project's install keeps it (and its own layer
# survives source edits).
RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

WORKDIR /opt/resnas
COPY pyproject.toml README.md ./
COPY nas/ nas/
COPY search_spaces/ search_spaces/
COPY workers/ workers/
COPY dashboard/ dashboard/
# ray[default] adds Ray's own dashboard (port 8265) to the ray[tune] the project needs.
RUN pip install . "ray[default]"

# Never run as root. /shared/ray is the mount point of the Tune storage volume shared by every Ray
# node (a fresh named volume takes this folder's owner).
RUN useradd --create-home --uid 1000 resnas \
    && mkdir -p /shared/ray \
    && chown resnas:resnas /shared/ray
USER resnas
WORKDIR /home/resnas

# Ray: 6379 (GCS, head), 8265 (Ray dashboard); 8501: the resnas dashboard.
EXPOSE 6379 8265 8501

# No ENTRYPOINT: the compose services run `ray start ...` or `nas ...` as their command.
CMD ["nas", "--help"]
