"""The capacity run (docs/scale.md, "Capacity of one cluster"): scripts/fleet with 500, 2,000
and 5,000 boards (MUTANTOPS_BENCH_CAPACITY) in 10 Mutations x 3 variants, 15-minute polls
compressed 60 times, CAPACITY_MINUTES of steady phase each, with the release binary, with
screens (a stand-in renderer, a screen request at every wake) up to SCREENS_UP_TO boards. Each run
starts a control plane of its own (MUTANTOPS_CLUSTER_DIR .cluster-capacity, stopped and wiped
after it) before the bench's own cluster is up, so nothing else of the bench shares the 2
cores. The fleet's figures (its JSON) are kept as they are; the targets judge the largest run:
no answer 5xx, poll p99, the operator's writes per device-hour and its RSS. The largest run is
then repeated once with kine on SQLite behind the API server (k3s's default datastore:
MUTANTOPS_DATASTORE=kine; MUTANTOPS_BENCH_CAPACITY_KINE=0 skips it), reported with the writes
kine absorbed per second and whether any request timed out; no target judges it."""

import json
import os
import subprocess
import sys

from common import BIN, REPO, log, row, step, tail

# What kine absorbed is written as scripts/fleet writes it.
sys.path.insert(0, str(REPO / "scripts/fleet.d"))
import kine  # noqa: E402

CAPACITY_MINUTES = 2
CLUSTER_DIR = REPO / ".cluster-capacity"
# Targets for the largest run (5,000 boards).
P99_TARGET_MS = 50
RSS_TARGET_MIB = 40
# Screen requests answered 304: the boards ask at every wake, the picture changes every 6 hours.
SCREENS_304_TARGET = 95
# The runs with screens: a screen request at every wake doubles the simulator's requests, and
# at 5,000 boards the simulator (one Python process) and the API server together take both
# cores, so the largest run goes without them and the 304 share is judged at the largest run
# that has them.
SCREENS_UP_TO = 2000
# A device's lastSeen is written when older than persistEvery (10m by default, compressed as
# the interval is): at most 6 writes per device-hour, and one per change of state besides
# (R40). The state changes of the Wi-Fi and power shares are on top of this bound.
PERSIST_MINUTES = 10
WRITES_TARGET = 60 / PERSIST_MINUTES


def boards(b):
    return b.CAPACITY


def measure(b):
    R = b.R
    R["capacity"] = []
    if not b.DO_CAPACITY or not boards(b):
        log("capacity run skipped")
        return
    env = dict(os.environ, MUTANTOPS_CLUSTER_DIR=str(CLUSTER_DIR), MUTANTOPS_DATASTORE="etcd")
    for n in boards(b):
        run(b, n, env, "")
    if os.environ.get("MUTANTOPS_BENCH_CAPACITY_KINE", "1") != "0":
        run(b, max(boards(b)), dict(env, MUTANTOPS_DATASTORE="kine"), "-kine")


def run(b, n, env, suffix):
    """One fleet run of n boards on the datastore of `env`, its figures kept in R["capacity"]."""
    R = b.R
    store = env["MUTANTOPS_DATASTORE"]
    step(f"capacity: scripts/fleet --boards {n} --minutes {CAPACITY_MINUTES} (a control plane of its own in "
         f"{CLUSTER_DIR.name}, on {store})")
    out, log_path = b.path(f"capacity-{n}{suffix}.json"), b.path(f"capacity-{n}{suffix}.log")
    with open(log_path, "w") as f:
        p = subprocess.run([str(REPO / "scripts/fleet"), "--boards", str(n), "--minutes", str(CAPACITY_MINUTES),
                            *(["--screens"] if n <= SCREENS_UP_TO else []), "--binary", str(BIN),
                            "--json", str(out)], cwd=REPO, env=env, stdout=f,
                           stderr=subprocess.STDOUT)
    if p.returncode or not out.is_file():
        # Shown as a failed run, not the end of the bench: the other figures stand.
        tail(log_path, 30)
        log(f"scripts/fleet --boards {n} on {store} failed (exit {p.returncode}): see {log_path}")
        R["capacity"].append({"boards": n, "datastore": store, "failed": f"exit {p.returncode}"})
        return
    f = json.loads(out.read_text())
    R["capacity"].append(summary(f))
    c = R["capacity"][-1]
    log(f"{n} boards on {store}: polls {c['polls']} ({c['codes']}), p99 {c['p99']} ms, writes/device-hour "
        f"{c['writes']}, operator RSS {c['rss_hwm']} / {c['rss']} MiB{c['kine'] and '; ' + c['kine']}")


def summary(f):
    """What the rows show of one fleet run."""
    polls = f["polls_by_code"]
    ms = f["poll_ms"]
    mib = (lambda kib: f"{float(kib) / 1024:.1f}")
    window = f["window_s"] or 1
    return {
        "boards": f["boards"], "booted": f["booted"], "mutations": f["mutations"], "variants": f["variants"],
        "polls": f["polls"],
        "codes": " ".join(f"{k}:{v}" for k, v in polls.items()) or "none",
        "fivexx": sum(v for k, v in polls.items() if int(k) >= 500 or int(k) == 0)
        + sum(v for k, v in f["enrolls_by_code"].items() if int(k) >= 500 or int(k) == 0),
        "throttled": polls.get("429", 0),
        "p50": fmt(ms["p50"]), "p99": fmt(ms["p99"]), "max": fmt(ms["max"]),
        "writes": f"{f['writes_per_device_hour_total']:.2f}",
        "writes_by_kind": ", ".join(f"{k} {v:.2f}" for k, v in sorted(f["writes_per_device_hour"].items())) or "none",
        "apiserver_cpu": f"{100 * f['apiserver_cpu_s'] / window:.0f}",
        "operator_cpu": f"{100 * f['operator_cpu_s'] / window:.0f}",
        "simulator_cpu": f"{100 * f['simulator_cpu_s'] / window:.0f}",
        "rss": mib(f["operator_rss_kib"]), "rss_hwm": mib(f["operator_hwm_kib"]),
        "apiserver_rss": mib(f["apiserver_rss_kib"] or 0),
        "simulated_hours": f"{f['simulated_hours']:g}", "compress": f"{f['compress']:g}",
        "screens": bool(f["screens"]),
        "screen_requests": sum(f["screens_by_code"].values()),
        "screen_codes": " ".join(f"{k}:{v}" for k, v in f["screens_by_code"].items()) or "none",
        "screens_304": (f"{100 * f['screens_by_code'].get('304', 0) / sum(f['screens_by_code'].values()):.1f}"
                        if f["screens_by_code"] else "-"),
        "datastore": f.get("datastore", "etcd"), "kine": kine_text(f.get("kine"), f),
    }


def kine_text(k, f):
    """What kine absorbed, and whether anything timed out (a board's request without an
    answer, a failed statement, a statement kine logged as slow)."""
    timeouts = sum(v for key, v in f["errors"].items() if key.split(":")[0].split(" ")[-1] == "0")
    return kine.text(k, timeouts)


def fmt(x):
    return "-" if x is None else f"{x:.1f}"


def rows(b):
    runs = b.R.get("capacity") or []
    if not runs:
        yield row("capacity (scripts/fleet)", "skipped (MUTANTOPS_BENCH_CAPACITY empty or --no-capacity)", "-", "-")
        return
    largest = max(c["boards"] for c in runs)
    with_screens = max((c["boards"] for c in runs if c.get("screens") and not c.get("failed")), default=None)
    for c in runs:
        on_kine = c.get("datastore") == "kine"
        judged = c["boards"] == largest and not on_kine
        if c.get("failed"):
            yield row(f"capacity, {c['boards']} boards on {c.get('datastore', 'etcd')}: scripts/fleet failed "
                      f"({c['failed']}; its log in the run directory)", "-", "a run" if judged else "-",
                      "MISSED" if judged else "-")
            continue
        what = (f"capacity, {c['boards']} boards ({c['mutations']} Mutations x {c['variants']} variants, 15m polls "
                f"compressed {c['compress']}x, {c['simulated_hours']} h simulated{', kine/SQLite' if on_kine else ''})")
        yield row(f"{what}: polls (by code); answers 5xx or none", f"{c['polls']} ({c['codes']}); {c['fivexx']}",
                  "0" if judged else "-", judge(judged, c["fivexx"] == 0))
        yield row("  ... poll p50 / p99 / max (connect to last byte, the simulator's clock)",
                  f"{c['p50']} / {c['p99']} / {c['max']} ms", f"p99 ≤ {P99_TARGET_MS} ms" if judged else "-",
                  judge(judged, c["p99"] != "-" and float(c["p99"]) <= P99_TARGET_MS))
        yield row("  ... the operator's writes per device-hour (audit log)", f"{c['writes']} ({c['writes_by_kind']})",
                  f"≤ {WRITES_TARGET:g} + state changes" if judged else "-",
                  judge(judged, float(c["writes"]) <= WRITES_TARGET))
        yield row("  ... operator RSS peak / settled (VmHWM / VmRSS)", f"{c['rss_hwm']} / {c['rss']} MiB",
                  f"≤ {RSS_TARGET_MIB} MiB" if judged else "-",
                  judge(judged, float(c["rss_hwm"]) <= RSS_TARGET_MIB))
        if c.get("screens"):
            shown = not on_kine and c["boards"] == with_screens
            yield row("  ... screen requests (If-None-Match at every wake; the picture changes every 6 h): 304 share",
                      f"{c.get('screens_304', '-')} % of {c.get('screen_requests', 0)} ({c.get('screen_codes', 'none')})",
                      f"≥ {SCREENS_304_TARGET} %" if shown else "-",
                      judge(shown, c.get("screens_304", "-") != "-" and float(c["screens_304"]) >= SCREENS_304_TARGET))
        yield row("  ... CPU of one core in the steady phase: API server / operator / simulator",
                  f"{c['apiserver_cpu']} % / {c['operator_cpu']} % / {c['simulator_cpu']} %", "-", "-")
        if on_kine:
            yield row("  ... what kine/SQLite absorbed in the steady phase", c["kine"] or "no kine figures", "-", "-")


def judge(judged, ok):
    if not judged:
        return "-"
    return "met" if ok else "MISSED"


def text(b):
    """The paragraph of "How each figure is measured"."""
    return f"""### Capacity of one cluster

`capacity.py` runs `scripts/fleet --boards N --minutes {CAPACITY_MINUTES}` for each N of
`MUTANTOPS_BENCH_CAPACITY` ({' '.join(str(n) for n in boards(b)) or 'none'}), before the
bench's own control plane starts, each on a control plane of its own (`.cluster-capacity`,
stopped and wiped after it): 10 Mutations x 3 variants with `spec.devices`, every board enrolling
with its Mutation's key and polling every 15 minutes compressed 60 times (15 s), 5 % of the
boards losing Wi-Fi and 2 % power for a while (docs/scale.md says what a board does). Counted
over the steady phase only: polls by answer (0 is no answer), the poll's latency from the
simulator's side (connect to last byte; the simulator shares the 2 cores), the operator's
writes per device-hour from the API server's audit log (lastSeen is written at most once per
`persistEvery`, 10 minutes compressed as the interval is, and on a change of state, R40), the
CPU of each process over the window and the operator's RSS. The targets judge the largest run.
The runs of up to {SCREENS_UP_TO:,} boards have screens (`--screens`): each variant's Service
is pointed at a stand-in renderer on this host (an EndpointSlice naming it), whose picture
changes every 6 simulated hours; the operator fetches it once per refresh (every interval) and
the boards ask for their screen at every wake, on the poll's connection, with `If-None-Match`,
so a screen request is a 304 unless the picture changed since the board's last; the share of
304s is judged at the largest of them. A screen request at every wake doubles the simulator's
requests: at 5,000 boards the simulator (one Python process) and the API server together
take both cores, so that run goes without screens. The largest run is repeated once on kine with SQLite in
place of etcd (`MUTANTOPS_DATASTORE=kine`, as k3s runs it, with fsync on; no target judges
it): the writes kine absorbed are its SQL inserts between the marks (every create, update
and delete is one), their p99 from `kine_sql_time_seconds`, and a timeout is a board's request
left without an answer, a failed statement or a statement kine logged as slow (over 1 s).
"""
