"""bench_keep's document: the kept files, byte for byte."""
import json
import os
import re
import subprocess
import sys
import unittest

from hmdptools import keep
from hmdptools.tests.support import FIXTURES, SCRIPTS, RunDir


def kept_bytes(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


class Document(RunDir):
    def again(self, name):
        """The kept file NAME, written again from its results and lines."""
        kept = json.loads(kept_bytes(name))
        lines = None
        if "lines" in kept:
            # As the bench printed them into its lines file, in colour.
            self.write("lines.txt", "".join(f"\x1b[1m{line}\x1b[0m\n" if line.startswith("Run ") else line + "\n"
                                            for line in kept["lines"]))
            with open(self.path("lines.txt"), encoding="utf-8") as f:
                lines = f.readlines()
        doc = keep.document(kept["results"], kept["command"], lines, kept["bench"], kept["started"], kept["commit"],
                            kept["uncommittedChanges"], kept["ended"], kept["box"])
        keep.write(doc, self.path("kept.json"))
        with open(self.path("kept.json"), "rb") as f:
            return f.read()

    def test_a_kept_file_with_its_lines(self):
        # bench-cpu's tables: µ and ÷ kept as they are, not escaped.
        self.assertEqual(self.again("2026-11-28-0044-bench-cpu-e94afb5.json"),
                         kept_bytes("2026-11-28-0044-bench-cpu-e94afb5.json"))

    def test_a_kept_file_without_lines(self):
        self.assertEqual(self.again("2026-11-28-0045-bench-sync-e94afb5.json"),
                         kept_bytes("2026-11-28-0045-bench-sync-e94afb5.json"))

    def test_the_command_line_as_bench_keep_runs_it(self):
        summary = self.write("summary.json", {"1": {"runs": 3}})
        lines = self.write("medians.txt", "\n\x1b[32mmedians of the runs (min-max)\x1b[0m\n")
        env = dict(os.environ, PYTHONPATH=SCRIPTS)
        for lines_file, name in ((lines, "with.json"), ("", "without.json")):
            subprocess.run([sys.executable, "-m", "hmdptools.keep", "write", summary, self.path(name),
                            'RUNS=3 MODES="sync async" scripts/bench-many', lines_file, "bench-many",
                            "2026-11-30T10:00:00Z", "abc1234", "true"], check=True, cwd="/", env=env)
        doc = json.loads(self.read("with.json"))
        self.assertEqual(list(doc), ["bench", "started", "ended", "commit", "uncommittedChanges", "box", "command",
                                     "results", "lines"])
        self.assertEqual(doc["lines"], ["", "medians of the runs (min-max)"])
        self.assertIs(doc["uncommittedChanges"], True)
        self.assertEqual(doc["command"], 'RUNS=3 MODES="sync async" scripts/bench-many')
        self.assertRegex(doc["ended"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(set(doc["box"]), {"cpus", "cpu", "memGiB", "os", "kernel"})
        self.assertEqual(doc["box"]["cpus"], os.cpu_count())
        self.assertNotIn("lines", json.loads(self.read("without.json")))
        self.assertTrue(self.read("without.json").endswith("}\n"))


class Machine(unittest.TestCase):
    def test_this_machine(self):
        box = keep.machine()
        with open("/proc/meminfo") as f:
            kib = int(re.search(r"MemTotal:\s+(\d+)", f.read())[1])
        self.assertEqual(box["memGiB"], round(kib / 2**20))
        self.assertNotEqual(box["cpu"], "")
        self.assertEqual(box["kernel"], os.uname().release)


if __name__ == "__main__":
    unittest.main()
