# syntax=docker/dockerfile:1
# Multi-stage: build with the Rust toolchain, run on a slim Debian with only
# the binary (migrations and Lua scripts are embedded in it).

FROM rust:1-bookworm AS build
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

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --no-create-home hmdp
COPY --from=build /src/target/release/hmdp /usr/local/bin/hmdp
USER hmdp
ENV BIND_ADDR=0.0.0.0:8081 RUST_LOG=info
EXPOSE 8081
ENTRYPOINT ["hmdp"]
CMD ["serve"]
