"""CPU time other processes took during a measurement sitting, so a slow stretch in a run can be
told apart from the model's error (the box has 2 cores, and the runs pin one rank to each).

    python docs/validation/cpu_watch.py PID OUT.jsonl [--every-s 2]

Every ``every_s`` seconds, one JSON line: the time; ``busy_cpu_s``, the box's user + system
CPU seconds since the last line (/proc/stat, processes that came and went included);
``ours_cpu_s``, those of PID's tree (the measurement; its processes alive at both ends);
``foreign_cpu_s``, those of the processes outside it, with the three largest by command
line; ``steal_cpu_s``, what the hypervisor took (/proc/stat steal). Stops when PID exits.
Reads /proc only; nothing is changed.
"""

import argparse
import json
import os
import time
from pathlib import Path

TICK_S = os.sysconf("SC_CLK_TCK")


def _procs() -> dict[int, tuple[int, float, str]]:
    """{pid: (ppid, cpu seconds so far, command line)} of every process readable now."""
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        out[int(entry)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / TICK_S, cmd[:120])
    return out


def _busy_s() -> tuple[float, float]:
    """(user + nice + system, steal) CPU seconds of the whole box so far: steal is the time the
    hypervisor ran something else while this VM wanted to run."""
    f = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:9]]
    return (f[0] + f[1] + f[2]) / TICK_S, f[7] / TICK_S


def _tree(root: int, procs: dict) -> set[int]:
    mine, grew = {root}, True
    while grew:
        grew = False
        for pid, (ppid, _, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    return mine


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pid", type=int)
    ap.add_argument("out", type=Path)
    ap.add_argument("--every-s", type=float, default=2.0)
    a = ap.parse_args()
    me = os.getpid()
    last, last_busy = _procs(), _busy_s()
    with open(a.out, "a") as f:
        while os.path.exists(f"/proc/{a.pid}"):
            time.sleep(a.every_s)
            now, busy = _procs(), _busy_s()
            ours = _tree(a.pid, now) | {me}
            used = {pid: cpu - (last[pid][1] if pid in last else 0.0) for pid, (_, cpu, _) in now.items()}
            mine = sum(s for pid, s in used.items() if pid in ours and pid in last)
            used = {pid: s for pid, s in used.items() if pid not in ours and s > 0}
            top = sorted(used, key=used.get, reverse=True)[:3]
            line = {"t_unix": round(time.time(), 3), "busy_cpu_s": round(busy[0] - last_busy[0], 3)}
            line["steal_cpu_s"] = round(busy[1] - last_busy[1], 3)
            line |= {"ours_cpu_s": round(mine, 3), "foreign_cpu_s": round(sum(used.values()), 3)}
            line["top"] = [[round(used[p], 3), now[p][2]] for p in top]
            f.write(json.dumps(line) + "\n")
            f.flush()
            last, last_busy = now, busy


if __name__ == "__main__":
    main()
