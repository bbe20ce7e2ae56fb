# Shared by scripts/test and scripts/stack: brings a Debian/Ubuntu machine
# from "nothing set up" to "MariaDB and Redis answer, DATABASE_URL works".
# Idempotent: every step first checks whether it is already done.
# Its parts, sourced below: scripts/lib-install.sh (apt, Rust, cargo's
# tools, the NATS server), scripts/lib-stores.sh (the machine's MariaDB and
# Redis, DATABASE_URL, prepare_machine) and scripts/lib-processes.sh (pid
# files, background jobs, the stack's secrets, nginx's workers, the hosts).
# shellcheck shell=bash

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STATE_DIR="$ROOT/.stack"
mkdir -p "$STATE_DIR"
. "$ROOT/scripts/urls.sh"

# The cargo profile the scripts build and run: release (what is deployed
# and what the benches measure), or dev (.ci/run: the build the tests made,
# its dependencies optimized by Cargo.toml's profile.dev, serves every later
# check: one build of the workspace instead of two), or profiling (bench-cpu).
HMDP_BUILD=${HMDP_BUILD:-release}
# Cargo's own target folder: the clone's, or CARGO_TARGET_DIR's (.ci/run's
# build cache, kept between a machine's runs).
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
case $HMDP_BUILD in dev | test) BIN_DIR="$TARGET_DIR/debug" ;; *) BIN_DIR="$TARGET_DIR/$HMDP_BUILD" ;; esac

# The time of day on every line: a slow section is found in the log.
log() { printf '\033[1m[hmdp %(%T)T]\033[0m %s\n' -1 "$*" >&2; }
die() { log "error: $*"; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

. "$ROOT/scripts/lib-install.sh"

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    poll_for "$1" "${@:3}" || die "$2 did not come up within ${1}s"
}

# An instance's log, on standard input, says it last started serving in
# MODE (a restart that failed leaves the other mode's instance answering).
last_served_in() { # last_served_in MODE < LOG
    sed 's/\x1b\[[0-9;]*m//g' | grep ' serving' | tail -1 | grep -q "mode=\"$1\""
}

# Polls COMMAND every 0.2 s for up to SECONDS; fails instead of dying, for
# a caller that shows what went wrong first.
poll_for() { # poll_for SECONDS COMMAND...
    local seconds=$1 i
    shift
    for ((i = 0; i < seconds * 5; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}

. "$ROOT/scripts/lib-stores.sh"

# The workspace's binaries, always built together, quietly (a failed build
# shows cargo's errors and stops). Cargo unifies the features of shared
# crates over what one command builds: built apart (the instance for the
# stack, the load tool for a sale), each set rebuilt them, and hmdp with
# them, every time the scripts went from one to the other. And the
# variables cargo sets for a test are dropped: a test that runs `stack up`
# would hand them to ring's build script, which watches some of them
# (CARGO_MANIFEST_DIR, CARGO_PKG_NAME), and every crate above ring was
# built again, inside the test and again after it (4 minutes each).
build_bins() { # build_bins [PROFILE]
    local args=(--profile "${1:-$HMDP_BUILD}" --locked --bin hmdp --bin seckill-load --bin hmdp-lab --bin order-events)
    # dev: what `cargo test --all-targets` builds, with its features (the
    # tests' dev-dependencies): the binaries come from the tests' build.
    local cargo=cargo_unlinted
    [ "${1:-$HMDP_BUILD}" = dev ] && args=(--locked --all-targets) && cargo=cargo
    (
        cd "$ROOT"
        # The tests' build is the linted one: a check that had not set the
        # lints (check-upgrade, check-backup) built the workspace again
        # without them, a minute each time.
        [ "$cargo" = cargo ] && lints_in_build
        for var in $(compgen -e); do
            case $var in
                CARGO_PKG_* | CARGO_MANIFEST_* | CARGO_CFG_* | CARGO_BIN_* | CARGO_CRATE_NAME | CARGO_PRIMARY_PACKAGE | \
                    CARGO_TARGET_TMPDIR | OUT_DIR) unset "$var" ;;
            esac
        done
        $cargo build "${args[@]}" >/dev/null 2>&1 || $cargo build "${args[@]}"
    ) || die "cargo build failed"
}

# What every bench does first: the machine ready, its output folder
# ($out, under .stack/), and the binaries built (HMDP_BUILD).
# The commit the code is at, and "true" when the code differs from it
# (tracked changes, or new files a build would take in).
# What a bench measures: every file but the pages (README, docs, BENCHMARKS).
CODE_PATHS=(src crates lua migrations tools tests nginx scripts Cargo.toml Cargo.lock)
code_state() {
    local dirty=false
    if [ -n "$(git -C "$ROOT" status --porcelain -- "${CODE_PATHS[@]}" 2>/dev/null)" ]; then
        dirty=true
    fi
    echo "$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown) $dirty"
}

bench_start() { # bench_start OUT_NAME
    prepare_machine
    out="$STATE_DIR/$1"
    mkdir -p "$out"
    BENCH_NAME=$1
    BENCH_STARTED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
    build_bins
    # After the build: what the binaries were built from.
    read -r BENCH_COMMIT BENCH_DIRTY <<<"$(code_state)"
}

# Python for a bench's lines and summary: scripts/hmdptools, run as
# `bench_python -m hmdptools.MODULE COMMAND ARGS...`, where the medians and
# spread every bench prints are computed in one place.
bench_python() { PYTHONPATH="$ROOT/scripts${PYTHONPATH:+:$PYTHONPATH}" python3 "$@"; }

# With KEEP=1, keeps a bench's summary in docs/bench/ with when, on which
# commit and machine, and by which command it was made: the files that
# README's and BENCHMARKS' figures are generated from (scripts/figures).
bench_keep() { # bench_keep SUMMARY_JSON COMMAND [LINES_FILE]
    if [ "${KEEP:-0}" != 1 ]; then
        log "summary: $1 (KEEP=1 keeps it in docs/bench/, where scripts/figures reads it)"
        return 0
    fi
    [ "$BIN_DIR" = "$TARGET_DIR/release" ] || die "KEEP=1 keeps figures of the release build only (HMDP_BUILD=$HMDP_BUILD)"
    local kept commit dirty
    # A commit or an edit during the runs (the stack rebuilds what
    # changed) makes them runs of code no commit holds.
    read -r commit dirty <<<"$(code_state)"
    # (A commit of the pages alone, the docs of a run, changes no code.)
    if [ "$dirty" = true ] || ! git -C "$ROOT" diff --quiet "$BENCH_COMMIT" "$commit" -- "${CODE_PATHS[@]}"; then
        BENCH_DIRTY=true
    fi
    kept="$ROOT/docs/bench/$(date -u +%F-%H%M)-$BENCH_NAME-$BENCH_COMMIT.json"
    bench_python -m hmdptools.keep write "$1" "$kept" "$2" "${3:-}" "$BENCH_NAME" "$BENCH_STARTED" "$BENCH_COMMIT" "$BENCH_DIRTY"
    log "kept: ${kept#"$ROOT"/} (scripts/figures generates the pages' figures from it)"
}

# A pid file is ours only while that pid still runs the program we started.
running() { # running PIDFILE PATTERN
    local pid
    [ -f "$1" ] || return 1
    pid=$(cat "$1")
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q "$2"
}

. "$ROOT/scripts/lib-processes.sh"
