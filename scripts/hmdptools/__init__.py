"""The bench scripts' Python, written once: what the shell scripts under
scripts/ hand a run's outputs to when the work needs data structures or
parsing (a sale's line, the medians of the runs and their spread, the
summary kept in docs/bench/). Each module is one concern, run as

    bench_python -m hmdptools.MODULE COMMAND ARGS...

(`bench_python`, scripts/lib.sh, puts scripts/ on PYTHONPATH), and each
command prints what the script shows and writes the files it keeps, as the
scripts' heredocs did before they moved here. The tests, in tests/, feed
every command real kept outputs (docs/bench/) and assert what it prints:

    (cd scripts && python3 -m unittest discover -s hmdptools/tests -t .)

  medians   the median of the runs' figures and their spread
  runs      the load tool's JSON of one run, read as every bench reads it
  sale      bench-sync, bench-async, bench-load (seckill-load's sale)
  crowd     bench-crowd (seckill-load crowd), and the line a crowd's sale shares
  many      bench-many (many vouchers opening together)
  past      bench-past (a sale on an empty database and on a long past)
  cpu       bench-cpu (server CPU per request)
  cluster   bench-cluster and bench-segments (the local Redis Cluster)
  lab       bench-lab (the strategy lab's runs)
  retire    bench-retire (nothing grows with the past)
  chaos     scripts/chaos (the checker's findings, the events' audit, the summary)
  keep      bench_keep's document in docs/bench/ (scripts/lib.sh)
"""
