"""The fault suite of issue 25 (`make faults`, or `pytest tests/faults`; marker `faults`).

Each test builds a deployment of its own (tests/faults/rig.py: an embedded PostgreSQL in a
temporary data dir, a redis-server on a free port, `ator serve` replicas as processes), so a
fault never touches the shared servers. A fault is injected while conversations are in flight
(each turn calls the `web_fetch` tool on a recorder path of its thread, then answers), then
the test asserts: every accepted message was drained by exactly one turn and recorded once,
every turn ended with a typed status, no money is left reserved (turns and org_usage), no
tool ran twice (the recorder's count per path). Each prints one `FAULT ...` line (`-s`).

- test_kill.py          SIGKILL of a replica at random offsets, ATOR_FAULT_KILLS times (50)
- test_dependencies.py  PostgreSQL restarted mid-load; Redis restarted, then away for 30 s
                        (ATOR_FAULT_REDIS_OUTAGE)
- test_pause.py         a replica SIGSTOPped past its lease, resumed after the takeover; its
                        stale turn must not write nor run its tool (the turn's fence:
                        engine.liveness)
- test_model_resets.py  the model endpoint drops TCP connections mid-stream (Cut(abrupt))
- test_clock.py         one replica's wall clock jumps +10 min, -15 min, +5 min while turns
                        run (rig.WallClock, an LD_PRELOAD library: tests/faults/wallclock.c);
                        also checked: its `date` header moved, the other's did not, and no
                        turn was lost to a jump (all `done`)
- test_disk.py          PostgreSQL's data dir on a tmpfs (rig.SmallDisk, needs root) filled
                        to the last byte under load for 10 s, then freed; also checked: posts
                        answer 503 `database_disk_full` while full (never a 500) and are
                        accepted again after, with no restart
"""
