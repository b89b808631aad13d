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
- test_pause.py         a replica SIGSTOPped past its lease, resumed after the takeover
- test_model_resets.py  the model endpoint drops TCP connections mid-stream (Cut(abrupt))

Not built: a clock jump on one replica, the database's disk full (tmpfs) and freed.
"""
