# Multi-stage: build with the Rust toolchain, run on a slim Debian with only
# the binary (migrations and Lua scripts are embedded in it).
#
# The base images are build arguments: the registry's by default, the ones
# scripts/check-compose makes offline (scripts/docker/offline.Dockerfile)
# where no registry is reachable.
ARG BUILDER_IMAGE=rust:1-bookworm
ARG RUNTIME_IMAGE=debian:bookworm-slim

FROM ${BUILDER_IMAGE} AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src src
# Every member of the workspace must be there for Cargo to read it (the
# libraries, the tools, the tests' support and fault proxy); only the
# service is built. scripts/test checks that this context holds the whole
# workspace (scripts/check-docker-context).
COPY crates crates
COPY tools tools
COPY tests/support tests/support
COPY tests/fault-proxy tests/fault-proxy
COPY migrations migrations
COPY lua lua
RUN cargo build --release --locked -p hmdp --bin hmdp

FROM ${RUNTIME_IMAGE}
# curl is the health check's; an offline base image carries both already.
RUN if ! command -v curl >/dev/null || [ ! -e /etc/ssl/certs/ca-certificates.crt ]; then \
        apt-get update \
        && apt-get install -y --no-install-recommends ca-certificates curl \
        && rm -rf /var/lib/apt/lists/*; \
    fi \
    && useradd --system --uid 10001 --no-create-home hmdp
COPY --from=build /src/target/release/hmdp /usr/local/bin/hmdp
USER hmdp
ENV BIND_ADDR=0.0.0.0:8081 RUST_LOG=info
EXPOSE 8081
ENTRYPOINT ["hmdp"]
CMD ["serve"]
