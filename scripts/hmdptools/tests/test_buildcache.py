""".ci/run's build cache: earlier clones' workspace crates go, the
dependencies stay."""
import os
import tempfile
import unittest

from hmdptools import buildcache
from hmdptools.tests.support import SCRIPTS

# Names as cargo wrote them in /var/cache/hmdp/target/debug (2026-12-02).
WORKSPACE = ["hmdp-04660bc1cff2d3e2", "hmdp-04660bc1cff2d3e2.d", "libhmdp-6106aa70336ce913.rlib",
             "libhmdp-6106aa70336ce913.rmeta", "hmdp_fault_proxy-d547f5bc87b7464e",
             "seckill_load-0b71ef66c8018857", "hmdp-lab-23456660ecb2b049", "auth-d7e60cd5bff0b610"]
DEPENDENCIES = ["libtokio-4ed6559936ae3b64.rlib", "tokio-4ed6559936ae3b64", "liblock_api-8b80b230a9581b65.rlib",
                "libc-aac96de6521cc1e1", "liblibc-aac96de6521cc1e1.rlib", "serde-b2a738cf7496544b.d",
                "hmdp", "hmdp.d", "incremental", "tokio-4ed6559936ae3b6"]
NAMES = {"hmdp", "hmdp-fault-proxy", "hmdp_fault_proxy", "seckill-load", "seckill_load", "hmdp-lab", "hmdp_lab",
         "auth", "lock"}


class Stale(unittest.TestCase):
    def test_the_workspace_crates_of_any_clone_are_stale_and_no_dependency_is(self):
        self.assertEqual(sorted(buildcache.stale(WORKSPACE + DEPENDENCIES, NAMES)), sorted(WORKSPACE))


class Prune(unittest.TestCase):
    def test_prune_removes_files_and_folders_of_the_workspace_from_every_profile_and_keeps_the_rest(self):
        with tempfile.TemporaryDirectory() as target:
            for profile in ("debug", "release"):
                for kind in buildcache.KINDS:
                    os.makedirs(os.path.join(target, profile, kind))
                for entry in WORKSPACE + DEPENDENCIES:
                    path = os.path.join(target, profile, "deps", entry)
                    with open(path, "w") as f:
                        f.write("x" * 10)
                os.makedirs(os.path.join(target, profile, ".fingerprint", "hmdp-04660bc1cff2d3e2"))
                os.makedirs(os.path.join(target, profile, "build", "ring-8ee8f98c6aa3d246"))
            # A folder that is no profile (nats-server's, say) is left alone.
            os.makedirs(os.path.join(target, "tools"))
            with open(os.path.join(target, "tools", "auth-d7e60cd5bff0b610"), "w") as f:
                f.write("kept")
            removed, freed = buildcache.prune(target, NAMES)
            self.assertEqual(removed, 2 * (len(WORKSPACE) + 1))
            self.assertEqual(freed, 2 * 10 * len(WORKSPACE))
            for profile in ("debug", "release"):
                self.assertEqual(sorted(os.listdir(os.path.join(target, profile, "deps"))), sorted(DEPENDENCIES))
                self.assertEqual(os.listdir(os.path.join(target, profile, ".fingerprint")), [])
                self.assertEqual(os.listdir(os.path.join(target, profile, "build")), ["ring-8ee8f98c6aa3d246"])
            self.assertTrue(os.path.exists(os.path.join(target, "tools", "auth-d7e60cd5bff0b610")))

    def test_a_target_folder_not_made_yet_is_nothing_to_prune(self):
        self.assertEqual(buildcache.prune("/nonexistent/hmdp-target", NAMES), (0, 0))


class WorkspaceNames(unittest.TestCase):
    def test_the_workspace_names_its_packages_and_test_targets_as_cargo_spells_them(self):
        names = buildcache.workspace_names(os.path.dirname(SCRIPTS))
        for name in ("hmdp", "seckill-load", "seckill_load", "auth", "hot_split"):
            self.assertIn(name, names)
        self.assertNotIn("tokio", names)
        # tests/http.rs shares its name with the `http` crate, whose
        # artifacts must stay.
        self.assertNotIn("http", names)
