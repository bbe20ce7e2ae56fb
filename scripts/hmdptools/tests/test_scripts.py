"""The shell side: the scripts call the package's commands, as bench_python
runs them, and no Python is left in them as a heredoc."""
import contextlib
import importlib
import io
import os
import re
import subprocess
import unittest

from hmdptools import cli
from hmdptools.tests.support import SCRIPTS, RunDir, audit, row, sale

CALL = re.compile(r"bench_python -m hmdptools\.([a-z_]+) ([a-z-]+)")


def shell_scripts():
    for name in sorted(os.listdir(SCRIPTS)):
        path = os.path.join(SCRIPTS, name)
        if os.path.isfile(path):
            with open(path, encoding="utf-8", errors="replace") as f:
                body = f.read()
            if name.endswith(".sh") or body.startswith("#!/usr/bin/env bash"):
                yield name, body


class Scripts(unittest.TestCase):
    def test_every_call_names_a_command_of_the_package(self):
        calls = [(name, m[1], m[2]) for name, body in shell_scripts() for m in CALL.finditer(body)]
        self.assertGreaterEqual(len(calls), 22)
        for script, module, command in calls:
            with self.subTest(script=script, module=module):
                self.assertIn(command, importlib.import_module(f"hmdptools.{module}").COMMANDS)

    def test_no_python_heredoc_is_left(self):
        for name, body in shell_scripts():
            with self.subTest(script=name):
                self.assertNotRegex(body, r"python3? - .*<<")


class BenchPython(RunDir):
    def test_runs_a_module_from_anywhere_as_lib_sh_defines_it(self):
        with open(os.path.join(SCRIPTS, "lib.sh"), encoding="utf-8") as f:
            definition = next(line for line in f if line.startswith("bench_python() {"))
        path = self.write("sync-64-1.json", sale(3.814476954, [row("success", 20000, 95.3, 279.295, 3.8)], audit()))
        got = subprocess.run(["bash", "-c", definition + 'cd / && bench_python -m hmdptools.sale sync-line "$1"', "-", path],
                             env=dict(os.environ, ROOT=os.path.dirname(SCRIPTS), PYTHONPATH=""),
                             capture_output=True, text=True, check=True)
        self.assertEqual(got.stdout, "wall=3.81s orders/s=5243 p50=95ms p99=279ms success=20000 oversold=0 "
                                     "duplicates=0 balanced=True audit=PASS\n")

    def test_an_unknown_command_is_refused_with_the_known_ones(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            self.assertEqual(cli.main({"line": print, "medians": print}, ["lines"]), 2)
        self.assertIn("{line,medians} ARGS...", err.getvalue())


if __name__ == "__main__":
    unittest.main()
