"""bench-retire's sales left in Redis and its points against the baseline."""
import json
import os
import unittest

from hmdptools import retire
from hmdptools.tests.support import RunDir, fixture, printed, text

PRINTED = fixture("2026-11-28-bench-retire-b7f4fdb.txt")


class Summary(RunDir):
    def write_points(self, mode, points):
        for p in points:
            self.write(f"{mode}-{p['sales']}.point", " ".join(
                str(v) for v in [p["sales"], p["redisUsedMemory"], p["redisKeys"], p["sessions"], p["saleKeysLeft"],
                                 *p["instanceRssKib"]]) + "\n")

    def test_the_printed_run_that_found_a_problem(self):
        # 2026-11-28 00:46, b7f4fdb: the asynchronous instances' RSS grew
        # past the bound, so the script exited 1 and kept no JSON.
        for line in PRINTED:
            fields = line.replace(",", "").split()
            if len(fields) == 7 and all(f.isdigit() for f in fields):
                mode = "async" if not os.path.exists(self.path("async-1000.point")) else "sync"
                self.write(f"{mode}-{fields[0]}.point", " ".join(fields) + "\n")
        shown, status = printed(retire.COMMANDS["summary"], self.out, "250", "async", "sync")
        self.assertEqual(shown, text(PRINTED[PRINTED.index(""):]))
        self.assertEqual(status, 1)
        summary = json.loads(self.read("summary.json"))
        self.assertEqual(summary["async"]["problems"], ["an instance's RSS grew more than 10 %"])
        self.assertEqual(summary["sync"]["baselineSales"], 250)

    def test_the_kept_bench_retire_comes_out_again(self):
        kept = fixture("2026-11-28-0501-bench-retire-449606e.json")["results"]
        for mode, row in kept.items():
            self.write_points(mode, row["points"])
        lines, summary, bad = retire.summary(self.out, 250, ["async", "sync"])
        self.assertEqual(summary, kept)
        self.assertFalse(bad)
        self.assertEqual(lines[-1], "1000 sales against 250: instances RSS 0.973x, 0.917x; redis used_memory 1.508x "
                                    "(the load tool's sessions, 80,000, last 30 minutes)")

    def test_keys_left_and_no_warm_up_point(self):
        self.write_points("async", [
            {"sales": 0, "redisUsedMemory": 2780928, "redisKeys": 1, "sessions": 0, "saleKeysLeft": 0, "instanceRssKib": [30660, 30356]},
            {"sales": 50, "redisUsedMemory": 3109872, "redisKeys": 2001, "sessions": 2000, "saleKeysLeft": 0, "instanceRssKib": [45164, 40756]},
            {"sales": 100, "redisUsedMemory": 3309872, "redisKeys": 4013, "sessions": 4000, "saleKeysLeft": 12, "instanceRssKib": [45200, 40800]}])
        shown, status = printed(retire.COMMANDS["summary"], self.out, "250", "async")
        self.assertEqual(status, 1)
        self.assertEqual(shown.splitlines()[-2:], [
            "100 sales against 50: instances RSS 1.001x, 1.001x; redis used_memory 1.064x (the load tool's sessions, "
            "4,000, last 30 minutes)",
            "PROBLEM (async): 12 keys of ended sales left after 100 sales"])


class Leaving(RunDir):
    def setUp(self):
        super().setUp()
        self.write("async-1.json", {"voucherIds": [11, 12]})
        self.write("async-2.json", {"voucherIds": [13]})
        self.write("sync-1.json", {"voucherIds": [21]})
        os.utime(self.path("async-2.json"), (1000.0, 1000.0))
        os.utime(self.path("async-1.json"), (900.0, 900.0))
        self.now, self.slept = 1005.0, []

    def clock(self):
        return self.now

    def sleep(self, secs):
        self.slept.append(secs)
        self.now += secs

    def test_waits_for_the_newest_crowds_end_then_for_the_keys_to_go(self):
        scans = iter([["seckill:stock:{11}", "seckill:order:{13}", "seckill:stock:{21}", "login:token:x"],
                      ["seckill:stock:{21}"]])
        left = retire.leaving(self.out, "async", 20, scan=lambda: next(scans), clock=self.clock, sleep=self.sleep)
        self.assertEqual(left, 0, "a sync sale's key is not one of async's")
        self.assertEqual(self.slept, [15.0, 1])

    def test_gives_up_after_a_minute(self):
        left = retire.leaving(self.out, "async", 0, scan=lambda: ["seckill:stock:{12}", "seckill:user:{12}:7"],
                              clock=self.clock, sleep=self.sleep)
        self.assertEqual(left, 2)
        self.assertEqual(self.slept, [0.0] + [1] * 61)

    def test_scans_the_stacks_redis_under_its_prefix(self):
        fake = self.write("redis-cli", "#!/bin/sh\necho \"$*\" >>\"$(dirname \"$0\")/asked\"\n"
                                       "printf 'p:seckill:stock:{11}\\np:seckill:stock:{99}\\n'\n")
        os.chmod(fake, 0o755)
        env = {k: os.environ.get(k) for k in ("PATH", "REDIS_URL", "REDIS_KEY_PREFIX")}
        os.environ.update(PATH=f"{self.out}:{os.environ['PATH']}", REDIS_URL="redis://127.0.0.1:6379",
                          REDIS_KEY_PREFIX="p:")
        try:
            self.assertEqual(retire.keys_left(retire.scan_redis(), {11}), ["p:seckill:stock:{11}"])
        finally:
            for k, v in env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        self.assertEqual(self.read("asked"), "-u redis://127.0.0.1:6379 --scan --pattern p:seckill:*\n")


if __name__ == "__main__":
    unittest.main()
