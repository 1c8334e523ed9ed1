# The Notee image: the wheel built from this checkout (it carries the schema migrations), installed
# with the exact, hash-checked versions of requirements.lock, run as an unprivileged user.
#   docker build -t notee .        (compose.yaml builds it for every Notee service)
#   docker build -t notee-emulator --build-arg LOCK=requirements-emulator.lock .
#                                  (the same with the emulator's server: compose's emulator profile)

FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml setup.py MANIFEST.in README.md requirements.lock ./
COPY notee ./notee
COPY schema ./schema
COPY clients/python ./clients/python
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /dist . ./clients/python

FROM python:3.11-slim
# requirements.lock: what production runs; requirements-emulator.lock adds `notee emulator`'s server.
ARG LOCK=requirements.lock
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY ${LOCK} /tmp/requirements.lock
RUN pip install --no-cache-dir --require-hashes -r /tmp/requirements.lock && rm /tmp/requirements.lock
COPY --from=build /dist/*.whl /tmp/
# notee_sdk (clients/python, the SDK) serves the `notee admin|publish|...` commands over HTTP; its
# dependencies (httpx, pydantic) are already in requirements.lock.
RUN pip install --no-cache-dir --no-deps /tmp/notee-*.whl && pip install --no-cache-dir --no-deps /tmp/notee_sdk-*.whl \
    && rm /tmp/*.whl \
    && useradd --system --uid 10001 --home-dir /var/lib/notee --create-home --shell /usr/sbin/nologin notee \
    && install -d -o notee -g notee -m 700 /var/lib/notee/emulator
USER notee
WORKDIR /var/lib/notee
ENTRYPOINT ["notee"]
CMD ["--help"]
