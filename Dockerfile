# The Working Memory Service's image: the server and the light client it depends on, installed
# from this checkout into a virtual environment (runtime dependencies only, no dev tools), run
# as an unprivileged user, with its SQLite file (one replica) on a volume. Several replicas
# share PostgreSQL instead (WM_DATABASE_URL): see deploy/compose.yaml.
#
#   docker build -t working-memory-service:0.1.0 .
#   docker run -p 50051:50051 -v wm-data:/var/lib/wm -e WM_API_KEYS="team-a:$(openssl rand -hex 24)" \
#       working-memory-service:0.1.0
#
# Listening beyond loopback needs API keys (WM_API_KEYS / WM_API_KEYS_FILE) or, behind a mesh
# that authenticates callers, WM_ALLOW_INSECURE=1: the server refuses to start otherwise.
# PYTHON_IMAGE may name any Debian-based image with python3 (3.11+) and its venv module.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
# The third-party dependencies first, in a layer of their own that only the two pyproject.toml
# files key: a change to the sources reuses it and reinstalls only our two distributions
# (seconds), not the ~60 packages (about 120 CPU s of downloading, unpacking and compiling).
# The requirements are read from the pyproject files (no second list): the server's and its
# [otel] extra, the client's and its [cli] extra, without the server's requirement on the
# client, which comes from this checkout below. The [otel] extra is in: traces cost nothing
# until OTEL_EXPORTER_OTLP_ENDPOINT is set. The client's [cli] extra too: the server does not
# need it (its inspector renders without rich), but an operator inside the container expects
# `wm sessions list` to work.
COPY pyproject.toml ./
COPY clients/python/pyproject.toml clients/python/
RUN python3 -m venv /opt/wm \
    && python3 -c 'import tomllib; \
server = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
client = tomllib.load(open("clients/python/pyproject.toml", "rb"))["project"]; \
wanted = server["dependencies"] + server["optional-dependencies"]["otel"] \
    + client["dependencies"] + client["optional-dependencies"]["cli"]; \
print("\n".join(r for r in wanted if not r.startswith("wm-client")))' > /tmp/requirements.txt \
    && /opt/wm/bin/pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt
COPY README.md ./
COPY clients/python/ clients/python/
COPY wm_core/ wm_core/
COPY server/ server/
# Both distributions in one command, so the local wm-client satisfies the server's requirement
# on it (it is never looked up on an index). Every other requirement is already met by the layer
# above (one it missed would be installed here: that layer only saves time).
RUN /opt/wm/bin/pip install --no-cache-dir --disable-pip-version-check \
        "./clients/python[cli]" ".[otel]" \
    && /opt/wm/bin/python -c "import wm_server.app, wm_client, wm_client.cli"

FROM ${PYTHON_IMAGE}
RUN groupadd --system --gid 10001 wm \
    && useradd --system --uid 10001 --gid wm --home-dir /var/lib/wm --shell /usr/sbin/nologin wm \
    && mkdir -p /var/lib/wm \
    && chown wm:wm /var/lib/wm
COPY --from=build /opt/wm /opt/wm
ENV PATH=/opt/wm/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    WM_ADDRESS=0.0.0.0:50051 \
    WM_DATA_DIR=/var/lib/wm
VOLUME ["/var/lib/wm"]
WORKDIR /var/lib/wm
USER 10001:10001
EXPOSE 50051
# grpc.health.v1 through the server's own probe (no extra binary in the image).
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-m", "wm_server.healthcheck", "--timeout", "3"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["wm-server"]
