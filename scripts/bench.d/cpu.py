"""Where the CPU went while a scale point converged: every process of the control plane
(scripts/cluster's pid files: etcd, kube-apiserver, kube-controller-manager, ...), the
controller under test, the bench itself (its watcher decodes every event) and the
`kubectl create` processes of the bulk apply, sampled from
/proc every 0.25 s; and how busy the machine was (/proc/stat), so a slower write phase shows
whether the operator's CPU grew or the cores were full with someone else's work.

`Sampler` runs beside the point; `between(t0, t1)` gives CPU seconds per process over that
window (the nearest samples inside it) and the machine's busy share of all its cores."""

import os
import threading
import time
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
PERIOD = 0.25


def process_seconds(pid):
    """utime + stime of a process (all its threads) in seconds; None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may hold spaces: fields count from after it.
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def machine_seconds():
    """(busy, total) CPU seconds of every core since boot, from /proc/stat's cpu line."""
    words = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    ticks = [int(w) for w in words[:8]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    return (sum(ticks) - idle) / TICK, sum(ticks) / TICK


def children_seconds():
    """CPU seconds of this script's children that have exited (the kubectl processes)."""
    r = os.times()
    return r.children_user + r.children_system


def cluster_pids(cluster_dir):
    """{name: pid} from scripts/cluster's pid files (first line: the pid)."""
    pids = {}
    for f in sorted((Path(cluster_dir) / "pids").glob("*.pid")):
        try:
            pid = f.read_text().split("\n", 1)[0].strip()
        except OSError:
            continue
        if pid.isdigit():
            pids[f.stem] = int(pid)
    return pids


class Sampler(threading.Thread):
    def __init__(self, pids):
        super().__init__(daemon=True)
        self.pids = dict(pids)
        self.samples = []  # (time, {name: seconds}, kubectl seconds, (busy, total))
        self.stopping = threading.Event()
        self.sample()

    def sample(self):
        per = {}
        for name, pid in self.pids.items():
            s = process_seconds(pid)
            if s is not None:
                per[name] = s
        own = os.times()
        per["bench (its watcher)"] = own.user + own.system
        self.samples.append((time.time(), per, children_seconds(), machine_seconds()))

    def run(self):
        while not self.stopping.wait(PERIOD):
            self.sample()

    def stop(self):
        self.stopping.set()
        self.join()
        self.sample()

    def between(self, t0, t1):
        """{"per": {name: CPU s}, "kubectl": s, "busy": share of all cores, "seconds": window}
        over the samples nearest to [t0, t1] within it (t0's at or before it when there is
        none after it)."""
        first = next((s for s in self.samples if s[0] >= t0), self.samples[0])
        last = next((s for s in reversed(self.samples) if s[0] <= t1), self.samples[-1])
        window = max(last[0] - first[0], 1e-9)
        per = {name: round(last[1][name] - first[1][name], 1) for name in last[1] if name in first[1]}
        busy = (last[3][0] - first[3][0]) / max(last[3][1] - first[3][1], 1e-9)
        return {"per": per, "kubectl": round(last[2] - first[2], 1), "busy": round(busy, 3),
                "seconds": round(window, 1)}


def text(usage, cores):
    """"machine 97% busy (of 2 cores) over 23.0 s: kube-apiserver 25.1 s, etcd 9.0 s, ..."
    (the processes by CPU, most first; those under 0.1 s left out)."""
    parts = sorted(((s, n) for n, s in usage["per"].items() if s >= 0.1), reverse=True)
    if usage["kubectl"] >= 0.1:
        parts = sorted(parts + [(usage["kubectl"], "kubectl create")], reverse=True)
    return (f"machine {round(100 * usage['busy'])}% busy (of {cores} cores) over {usage['seconds']} s: "
            + ", ".join(f"{n} {s:.1f} s" for s, n in parts))
