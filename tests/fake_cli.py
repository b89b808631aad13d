"""A fake agent CLI (`claude` or `codex`), stdlib only, copied by the tests into an executable.

It reads its whole stdin (so a CLI whose stdin stayed open would hang here), writes what it
was started with (argv, environment, cwd, stdin, pid, process group, its child's pid) to the
scenario's `dump`, then replays the scenario's `lines`:
  an object -> one JSON line; {"raw": text} -> that text as a line; {"big": n} -> one line
  of n bytes; {"sleep": s}; {"hang": true} -> sleeps forever (a stream that stalls).
Then `after`: "exit" (with `exit`, default 0) or "hang" (alive after its last line).
`ignore_term` makes it (and its child) ignore SIGTERM; `child` starts a `sleep` in its group.
The scenario file is named by FAKE_SCENARIO (given through the operator's ATOR_CLI_ENV).
"""

import json
import os
import signal
import subprocess
import sys
import time

if sys.argv[1:] == ["--version"]:  # what `ator doctor` asks
    print("9.9.9 (" + os.path.basename(sys.argv[0]) + " fake)")
    sys.exit(0)
with open(os.environ["FAKE_SCENARIO"]) as _f:
    scenario = json.load(_f)
if scenario.get("ignore_term"):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
prompt = sys.stdin.read()
child = None
if scenario.get("child"):
    child = subprocess.Popen([sys.executable, "-c",
                              "import signal, time\n"
                              + ("signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                 if scenario.get("ignore_term") else "")
                              + "time.sleep(600)"])
dumps = scenario.get("dump")
if dumps:
    with open(dumps, "a") as f:
        f.write(json.dumps({"argv": sys.argv[1:], "env": dict(os.environ), "cwd": os.getcwd(),
                            "stdin": prompt, "pid": os.getpid(), "pgid": os.getpgid(0),
                            "child": child.pid if child else None}) + "\n")
out = sys.stdout
for line in scenario.get("lines", []):
    if isinstance(line, dict) and "sleep" in line:
        out.flush()
        time.sleep(line["sleep"])
    elif isinstance(line, dict) and line.get("hang"):
        out.flush()
        time.sleep(3600)
    elif isinstance(line, dict) and "raw" in line:
        out.write(line["raw"] + "\n")
    elif isinstance(line, dict) and "big" in line:
        out.write('{"type": "' + "x" * line["big"] + '"}\n')
    else:
        out.write(json.dumps(line) + "\n")
    out.flush()
if scenario.get("after") == "hang":
    time.sleep(3600)
sys.exit(scenario.get("exit", 0))
