"""The build .ci/run keeps between a machine's runs (CARGO_TARGET_DIR).
Every clone compiles the workspace's own crates again (their fingerprints
carry the clone's path), so what earlier clones left of them only fills
the disk; the dependencies' artifacts are what the cache is for.

    prune TARGET_DIR WORKSPACE_ROOT   removes the artifacts of the workspace's
                                      packages and targets from every profile
                                      of TARGET_DIR; prints what it freed
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

from hmdptools import cli

# What cargo names an artifact, a fingerprint or a build script's folder:
# the crate's name, a 16-digit hash, maybe an extension.
ARTIFACT = re.compile(r"^(?P<name>.+)-[0-9a-f]{16}(?:\..+)?$")
KINDS = ("deps", ".fingerprint", "build")


def spellings(names):
    return set(names) | {n.replace("-", "_") for n in names}


def workspace_names(root):
    """The workspace's package and target names, as cargo spells them in
    file names (with `_` for `-` too), less those a dependency shares (a
    test named `http` beside the `http` crate): a dependency's artifacts
    are never taken for the workspace's."""
    meta = json.loads(subprocess.run(["cargo", "metadata", "--no-deps", "--format-version", "1"], cwd=root,
                                     capture_output=True, text=True, check=True).stdout)
    packages = {pkg["name"] for pkg in meta["packages"]}
    targets = {t["name"] for pkg in meta["packages"] for t in pkg["targets"]}
    with open(os.path.join(root, "Cargo.lock"), "rb") as f:
        locked = {pkg["name"] for pkg in tomllib.load(f).get("package", [])}
    return spellings(packages | targets) - spellings(locked - packages)


def stale(entries, names):
    """The ENTRIES (file names in deps/, .fingerprint/ or build/) that are
    one of the workspace's NAMES (`lib` before a library's)."""
    found = []
    for entry in entries:
        m = ARTIFACT.match(entry)
        if not m:
            continue
        name = m.group("name")
        if name in names or (name.startswith("lib") and name[3:] in names):
            found.append(entry)
    return found


def size_of(path):
    if os.path.isdir(path) and not os.path.islink(path):
        return sum(size_of(os.path.join(path, e)) for e in os.listdir(path))
    return os.lstat(path).st_size


def prune(target, names):
    """Removes the workspace's artifacts from every profile folder of
    TARGET; returns (entries removed, bytes freed). Whatever it removes
    that a build still needs, cargo finds missing and makes again."""
    removed = freed = 0
    for profile in sorted(os.listdir(target)) if os.path.isdir(target) else []:
        if not os.path.isdir(os.path.join(target, profile, ".fingerprint")):
            continue
        for kind in KINDS:
            folder = os.path.join(target, profile, kind)
            if not os.path.isdir(folder):
                continue
            for entry in stale(os.listdir(folder), names):
                path = os.path.join(folder, entry)
                freed += size_of(path)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)
                removed += 1
    return removed, freed


def _prune(target, root):
    removed, freed = prune(target, workspace_names(root))
    print(f"the build cache {target}: {removed} artifacts of earlier clones' workspace crates removed "
          f"({freed // (1024 * 1024)} MB), the dependencies' kept")


COMMANDS = {"prune": _prune}

if __name__ == "__main__":
    sys.exit(cli.main(COMMANDS))
