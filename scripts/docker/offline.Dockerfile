# The base images of the compose stack, made where no image registry is
# reachable (scripts/check-compose). BASE is a Debian bookworm made by
# debootstrap and imported, with every package the stack runs already in it
# (nothing here may fetch). Each target stands in for the registry's image
# the compose file names by default, and takes the same settings:
#   rust       for rust:1-bookworm (the build stage), with the crates
#              vendored, since the build cannot reach crates.io either
#   mariadb    for mariadb:10.11 (MARIADB_* variables, healthcheck.sh)
#   redis      for redis:7
#   nginx      for nginx:1.26
#   prometheus for prom/prometheus
# The stack's runtime image is BASE itself, as debian:bookworm-slim is.
ARG BASE

FROM ${BASE} AS mariadb
COPY mariadb-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
COPY mariadb-healthcheck.sh /usr/local/bin/healthcheck.sh
# Debian's package set up a data folder as it was installed; the entrypoint
# makes the stack's own in the empty volume instead.
RUN rm -rf /var/lib/mysql/* \
    && mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld /var/lib/mysql
ENTRYPOINT ["docker-entrypoint.sh"]
CMD ["mariadbd"]
EXPOSE 3306

FROM ${BASE} AS redis
RUN mkdir -p /data && chown redis:redis /data
WORKDIR /data
USER redis
CMD ["redis-server"]
EXPOSE 6379

FROM ${BASE} AS nginx
# `root html` resolves under the prefix: /etc/nginx in the registry's
# image, /usr/share/nginx in Debian's package.
RUN rm -rf /usr/share/nginx/html && ln -s /etc/nginx/html /usr/share/nginx/html
CMD ["nginx", "-g", "daemon off;"]
EXPOSE 80

FROM ${BASE} AS prometheus
RUN mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
WORKDIR /prometheus
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
EXPOSE 9090

# Last: Docker's legacy builder runs every stage before the one it is
# asked for, and this one needs what only IMAGE_BUILD=1 puts in the context.
FROM ${BASE} AS rust
# The host's toolchain (only cargo, rustc and their libraries) and the
# workspace's crates, as `cargo vendor` wrote them, with the configuration
# that points Cargo at them.
COPY rust /usr/local/rust
COPY vendor /usr/local/cargo/vendor
COPY cargo-config.toml /usr/local/cargo/config.toml
ENV CARGO_HOME=/usr/local/cargo PATH=/usr/local/rust/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
