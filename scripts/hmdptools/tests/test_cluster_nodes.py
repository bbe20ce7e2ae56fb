"""hmdptools.cluster_nodes against CLUSTER NODES replies as Redis 7 writes
them: the hosts' cluster as made, after a failover, mid-partition and with
a slot being moved."""
import contextlib
import io
import os
import subprocess
import sys
import unittest

from hmdptools.cluster_nodes import main, masters_of_slot

SCRIPTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# redis-cli --cluster create over redis1-6 (10.231.0.31-.36), as redis1 sees it.
MADE = """\
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 10.231.0.31:6379@16379,redis1 myself,master - 0 0 1 connected 0-5460
a4b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4 10.231.0.32:6379@16379,redis2 master - 0 1700000000000 2 connected 5461-10922
1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e 10.231.0.33:6379@16379,redis3 master - 0 1700000000000 3 connected 10923-16383
9f8e7d6c5b4a39281706f5e4d3c2b1a098765432 10.231.0.34:6379@16379,redis4 slave 1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e 0 1700000000000 3 connected
0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b 10.231.0.35:6379@16379,redis5 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1700000000000 1 connected
5f4e3d2c1b0a99887766554433221100ffeeddcc 10.231.0.36:6379@16379,redis6 slave a4b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4 0 1700000000000 2 connected
"""

# redis1 lost: redis5 promoted and serving its slots, redis1 failed (no slots).
FAILED_OVER = """\
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 10.231.0.31:6379@16379,redis1 master,fail - 1700000000000 1700000000000 1 disconnected
a4b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4 10.231.0.32:6379@16379,redis2 myself,master - 0 0 2 connected 5461-10922
1b2c3d4e5f60718293a4b5c6d7e8f90a1b2c3d4e 10.231.0.33:6379@16379,redis3 master - 0 1700000000000 3 connected 10923-16383
0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b 10.231.0.35:6379@16379,redis5 master - 0 1700000000000 7 connected 0-5460
"""

# As the cut-off side saw it a moment before giving up: the old master only suspected (fail?).
SUSPECTED = FAILED_OVER.replace("master,fail", "master,fail?")

# An old view and a new one, both listing slots 0-5460: two masters named.
TWO = MADE + "0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b 10.231.0.35:6379@16379,redis5 master - 0 1 7 connected 0-5460\n"

# Slots in pieces, and slot 5461 being moved from redis2 to redis1.
MOVING = """\
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 10.231.0.31:6379@16379 myself,master - 0 0 1 connected 0-100 200 300-5460 [5461-<-a4b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4]
a4b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4 10.231.0.32:6379@16379 master - 0 1 2 connected 101-199 201-299 5461-16383 [5461->-e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca]
"""


class MastersOfSlot(unittest.TestCase):
    def test_each_master_serves_its_range_to_both_ends(self):
        for slot, ip in [(0, "10.231.0.31"), (5460, "10.231.0.31"), (5461, "10.231.0.32"),
                         (10922, "10.231.0.32"), (10923, "10.231.0.33"), (16383, "10.231.0.33")]:
            with self.subTest(slot=slot):
                self.assertEqual(masters_of_slot(MADE, slot), [ip])

    def test_replicas_serve_nothing(self):
        ips = {ip for slot in range(0, 16384, 97) for ip in masters_of_slot(MADE, slot)}
        self.assertEqual(ips, {"10.231.0.31", "10.231.0.32", "10.231.0.33"})

    def test_a_failed_master_is_not_named_its_promoted_replica_is(self):
        self.assertEqual(masters_of_slot(FAILED_OVER, 42), ["10.231.0.35"])

    def test_a_suspected_master_is_not_named_either(self):
        self.assertEqual(masters_of_slot(SUSPECTED, 42), ["10.231.0.35"])
        only_suspect = "\n".join(l for l in SUSPECTED.splitlines() if "redis5" not in l)
        self.assertEqual(masters_of_slot(only_suspect, 42), [])

    def test_two_views_of_one_slot_name_both(self):
        self.assertEqual(masters_of_slot(TWO, 7), ["10.231.0.31", "10.231.0.35"])

    def test_single_slots_pieces_and_a_slot_being_moved(self):
        self.assertEqual(masters_of_slot(MOVING, 200), ["10.231.0.31"])
        self.assertEqual(masters_of_slot(MOVING, 150), ["10.231.0.32"])
        self.assertEqual(masters_of_slot(MOVING, 250), ["10.231.0.32"])
        self.assertEqual(masters_of_slot(MOVING, 5461), ["10.231.0.32"])

    def test_nothing_read_names_nothing(self):
        self.assertEqual(masters_of_slot("", 1), [])
        self.assertEqual(masters_of_slot("\n\n", 1), [])


class CommandLine(unittest.TestCase):
    def run_module(self, *args, reply=MADE):
        env = dict(os.environ, PYTHONPATH=SCRIPTS)
        return subprocess.run([sys.executable, "-B", "-m", "hmdptools.cluster_nodes", *args], input=reply,
                              capture_output=True, text=True, env=env)

    def test_master_ip_prints_the_address_a_line(self):
        done = self.run_module("master-ip", "12182")
        self.assertEqual((done.returncode, done.stdout), (0, "10.231.0.33\n"))
        done = self.run_module("master-ip", "7", reply=TWO)
        self.assertEqual(done.stdout, "10.231.0.31\n10.231.0.35\n")

    def test_no_master_prints_nothing_and_succeeds(self):
        done = self.run_module("master-ip", "7", reply="")
        self.assertEqual((done.returncode, done.stdout), (0, ""))

    def test_usage(self):
        for argv in ([], ["master-ip"], ["other", "1"]):
            with self.subTest(argv=argv), contextlib.redirect_stderr(io.StringIO()) as err:
                self.assertEqual(main(argv), 2)
                self.assertIn("usage: python3 -m hmdptools.cluster_nodes master-ip SLOT", err.getvalue())


if __name__ == "__main__":
    unittest.main()
