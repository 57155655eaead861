# syntax=docker/dockerfile:1
# Multi-stage build of dendrod and the dendro CLI on Debian 12.
# The build stage installs deploy/packages.txt up to its test-only section
# (via the same deploy/install-deps.sh a developer runs); the runtime stage
# installs deploy/runtime-packages.txt and runs as an unprivileged user.

FROM debian:12 AS build
WORKDIR /src
COPY deploy/ deploy/
RUN bash deploy/install-deps.sh deploy/packages.txt --no-tests && rm -rf /var/lib/apt/lists/*
COPY . .
# Portable binaries: no -march=native in an image that may run elsewhere.
RUN BUILD_DIR=/build DENDRO_TESTS=OFF DENDRO_NATIVE=OFF BUILD_TYPE=Release \
      bash deploy/build.sh \
 && install -D /build/server/dendrod /out/dendrod \
 && install -D /build/client/dendro /out/dendro

FROM debian:12 AS runtime
COPY deploy/install-deps.sh deploy/runtime-packages.txt /tmp/deploy/
RUN bash /tmp/deploy/install-deps.sh /tmp/deploy/runtime-packages.txt \
 && rm -rf /var/lib/apt/lists/* /tmp/deploy \
 && useradd --system --uid 10001 --home-dir /var/lib/dendro --create-home dendro
COPY --from=build /out/dendrod /out/dendro /usr/local/bin/
USER dendro
VOLUME /var/lib/dendro
EXPOSE 50051 9464
ENV DENDRO_SERVER=127.0.0.1:50051
# The standard gRPC health check, on a plaintext health-only port inside
# the container, so it works whatever TLS or keys the main port requires.
HEALTHCHECK --interval=15s --timeout=5s --start-period=10s --retries=3 \
  CMD ["dendro", "--server", "127.0.0.1:8081", "health"]
# Prometheus metrics on 9464 (/metrics, plain HTTP without keys: counts and
# timings, no data): publish it only where the scraper is, e.g.
# -p 127.0.0.1:9464:9464.
ENTRYPOINT ["dendrod", "--listen", "0.0.0.0:50051", "--data_dir", "/var/lib/dendro", \
            "--health_listen", "127.0.0.1:8081", "--metrics_listen", "0.0.0.0:9464"]
# API keys cross the network, so the default serves TLS: mount the keys file
# (README, "Securing Dendro") and a directory with the certificate and key,
# both readable by uid 10001 (tls/ holding server.pem and server.key):
#   docker run -p 50051:50051 -v dendro-data:/var/lib/dendro
#     -v "$PWD/keys:/etc/dendro/keys:ro" -v "$PWD/tls:/etc/dendro/tls:ro" dendro
# Replacing these arguments with --allow_insecure serves without
# authentication or TLS: only for a port published on loopback
# (-p 127.0.0.1:50051:50051).
CMD ["--auth_keys", "/etc/dendro/keys", \
     "--tls_cert", "/etc/dendro/tls/server.pem", "--tls_key", "/etc/dendro/tls/server.key"]
