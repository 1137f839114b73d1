"""scripts/fleet's driver (scripts/fleet runs it; its header says what the run does and which
flags it takes): the arguments, the cluster and the operator (through scripts/bench.d's
helpers: the same `start_cluster`, `Bench.start_operator` and cleanup as scripts/bench), the
Mutations, the boards (boards.py) and the one line of figures.

Figures are counted over the steady phase only, which starts once every board has enrolled
and polled: the operator's writes (R40: `lastSeen` is written on a change of state, or when
older than `persistEvery`) from the API server's audit log, per board per hour of simulated
time; the Mutations' `lateAfter`, `goneAfter` and `persistEvery` are compressed by the same
factor as the boards' interval, so that a write per device-hour here is one on a real site.
"""

import asyncio
import base64
import collections
import gc
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "bench.d"))

import audit  # noqa: E402  (scripts/bench.d)
import common  # noqa: E402
import kine  # noqa: E402
import main as bench  # noqa: E402
from boards import Board, Fleet  # noqa: E402
from renderer import Renderer  # noqa: E402
from common import die, log, step  # noqa: E402

common.PREFIX = "fleet"

REPO = common.REPO
WRITES = ("create", "update", "patch", "delete")
IDLE_SECONDS = 15  # the API server's CPU before the boards, for comparison


def usage():
    """scripts/fleet's header: what it does, its flags."""
    text = (REPO / "scripts/fleet").read_text().splitlines()[1:]
    for line in text[:next(i for i, t in enumerate(text) if t.startswith("set -euo"))]:
        print(line[2:] if line.startswith("# ") else line.lstrip("#"))


def duration(text):
    """`15m`, `90s`, `1h` (or plain seconds) as seconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text or "")
    if not m or float(m.group(1)) <= 0:
        die(f"{text}: a duration such as 15m, 90s or 1h (--interval, --screen-changes)")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def arguments(argv):
    args = types.SimpleNamespace(boards=500, mutations=10, variants=3, minutes=2.0, compress=60.0, interval=900.0,
                                 wifi=5.0, power=2.0, screens=False, screen_changes=21600.0, keep_cluster=False,
                                 binary=None, json=None)
    words = iter(argv)

    def value(flag, kind=float):
        text = next(words, None)
        try:
            got = kind(text)
        except (TypeError, ValueError):
            die(f"{flag} needs a number")
        if got < 0 or (got == 0 and flag not in ("--wifi-loss", "--power-loss")):
            die(f"{flag} must be positive")
        return got

    for arg in words:
        if arg in ("--boards", "--mutations", "--variants"):
            setattr(args, arg[2:], value(arg, int))
        elif arg in ("--minutes", "--compress"):
            setattr(args, arg[2:], value(arg))
        elif arg in ("--wifi-loss", "--power-loss"):
            setattr(args, arg[2:].split("-")[0], value(arg))
        elif arg in ("--interval", "--screen-changes"):
            setattr(args, arg[2:].replace("-", "_"), duration(next(words, None)))
        elif arg in ("--screens", "--keep-cluster"):
            setattr(args, arg[2:].replace("-", "_"), True)
        elif arg in ("--binary", "--json"):
            setattr(args, arg[2:], next(words, None) or die(f"{arg} needs a path"))
        elif arg in ("-h", "--help"):
            usage()
            sys.exit(0)
        else:
            die(f"unknown argument {arg} (try --help)")
    per = math.ceil(args.boards / args.mutations)
    if per > 500:
        die(f"{per} boards per Mutation: spec.devices.maxDevices is at most 500 (more --mutations)")
    if args.variants > 500:
        die("--variants must be at most 500")
    return args


# --- the processes measured ----------------------------------------------------------------------


def cpu_seconds(pid):
    """User and system CPU seconds of a process so far (/proc/PID/stat)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def apiserver_pid(cluster_dir):
    try:
        pid = (Path(cluster_dir) / "pids/kube-apiserver.pid").read_text().split("\n", 1)[0].strip()
    except OSError:
        die(f"no {cluster_dir}/pids/kube-apiserver.pid")
    return int(pid)


def own_cpu():
    t = os.times()
    return t.user + t.system


# --- the Mutations ---------------------------------------------------------------------------------


def compressed(seconds, factor):
    """A duration of simulated time as the operator's real one, e.g. `10s` (at least 1 s)."""
    return f"{max(1, round(seconds / factor))}s"


def create_mutations(b, args, ns):
    """M Mutations through the API with the admin token, each with spec.devices (Open, maxDevices
    its share of the boards, the durations compressed) and K enrollable variants; their keys."""
    api = f"http://127.0.0.1:{b.api_port}/api/v1/namespaces/{ns}"
    base = json.loads((REPO / "deploy/examples/deployment.json").read_text())
    per = math.ceil(args.boards / args.mutations)
    f = args.compress
    devices = {"enrollment": "Open", "maxDevices": max(1, per), "lateAfter": compressed(1800, f),
               "goneAfter": compressed(86400, f), "persistEvery": compressed(600, f)}
    log(f"spec.devices of each: {json.dumps(devices)} (the defaults 30m, 24h, 10m divided by {f:g})")
    keys = {}
    for i in range(args.mutations):
        name = f"m{i}"
        body = {"name": name, "deployment": {**base, "metadata": {**base["metadata"], "name": name}},
                "variants": [{"label": f"v{j}", "instances": 0, "enrollable": True} for j in range(args.variants)],
                "devices": devices}
        if args.screens:
            body["service"] = {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "targetPort": 80}]}
        out = b.path(f"create-{name}.json")
        # The namespace's label reaches the operator's cache a moment after it is set: until
        # then the namespace is not served (404).
        deadline = time.monotonic() + 30
        while True:
            code = bench.api.request("POST", f"{api}/mutations", b.admin_token, json.dumps(body), out=out)
            if code != 404 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if code not in (200, 201):
            die(f"POST {api}/mutations ({name}) answered {code}: {out.read_text()[:300] if out.exists() else ''}")
        if args.screens:
            screen = {"spec": {"screen": {"port": "http", "path": "/screen.bmp",
                                          "refreshEvery": compressed(max(600, args.interval), f)}}}
            b.kubectl("-n", ns, "patch", "mutation", name, "--type=merge", "-p", json.dumps(screen))
        keys[name] = key(b, ns, name)
    return keys


def key(b, ns, name):
    """The Mutation's token (its enrollment key): Secret <name>-secret, key token."""
    deadline = time.monotonic() + 30
    while True:
        got = b.kubectl("-n", ns, "get", "secret", f"{name}-secret", "-o", "jsonpath={.data.token}", check=False,
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        token = base64.b64decode(got or "").decode(errors="replace")
        if len(token) == 64:
            return token
        if time.monotonic() > deadline:
            die(f"Secret {name}-secret holds no 64-character token after 30s")
        time.sleep(0.5)


# --- the run -----------------------------------------------------------------------------------------


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, math.ceil(p / 100 * len(values)) - 1))]


async def drive(b, args, fleet, boards, marks):
    """The boards' tasks: boot (every board enrolled and polled once, or the limit), then the
    steady phase of --minutes, bracketed by `marks` (a function called at its start and end)."""
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(board.life()) for board in boards]
    per = math.ceil(args.boards / args.mutations)
    # One interval for every board's first wake; a Mutation's key enrolls 2 a second after a
    # burst of 60 (R34), retried after Retry-After; and a margin.
    limit = fleet.interval + max(0, per - 60) / 2 + 60
    step(f"boot: {len(boards)} boards wake within one interval ({fleet.interval:.1f} s), enroll and poll "
         f"(at most {limit:.0f} s)")
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        booted = sum(1 for board in boards if board.booted)
        if booted == len(boards):
            break
        await asyncio.sleep(0.5)
    booted = sum(1 for board in boards if board.booted)
    log(f"{booted} of {len(boards)} boards enrolled and polled")
    if booted < len(boards):
        log(f"warning: {len(boards) - booted} boards have not polled yet; the steady phase starts anyway")
    step(f"steady: {args.minutes:g} min real = {args.minutes * args.compress / 60:g} h simulated")
    marks("start")
    await asyncio.sleep(args.minutes * 60)
    marks("end")
    fleet.stopping = True
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return booted, sum(1 for board in boards if board.booted)


def figures(b, args, fleet, booted, polled, at):
    """The steady phase's figures, as a dict (the JSON) and one line."""
    t0, t1 = at["start"]["t"], at["end"]["t"]
    events = [e for e in fleet.events if t0 <= e.t < t1]
    by = collections.defaultdict(collections.Counter)
    for e in events:
        by[e.kind][e.status] += 1
    polls_ms = [e.ms for e in events if e.kind == "poll" and e.status]
    sim_hours = args.minutes * args.compress / 60
    writes = {}
    counted = audit.count(b.audit_log, at["start"]["audit"], at["end"]["audit"], "mutantops/")
    for k, n in counted["by_resource"].items():
        if k.split(" ", 1)[0] in WRITES:
            writes[k] = n
    # Per board that polls: one that never got its token writes nothing and is not counted.
    device_hours = max(1, polled) * sim_hours
    errors = collections.Counter(f"{e.kind} {e.status}: {e.error}" for e in events if e.status == 0 or e.status >= 500)
    refusals = collections.Counter(f"{e.kind} {e.status}: {e.error}" for e in events
                                   if 400 <= e.status < 500 and e.status not in (401, 429))
    all_polls = sum(by["poll"].values())
    boot = collections.defaultdict(collections.Counter)
    for e in fleet.events:
        if e.t < t0:
            boot[e.kind][e.status] += 1
    f = {
        "boards": args.boards, "booted": booted, "polled": polled, "mutations": args.mutations, "variants": args.variants,
        "compress": args.compress, "interval_s": args.interval, "real_interval_s": fleet.interval,
        "minutes": args.minutes, "simulated_hours": sim_hours,
        "wifi_loss_percent": args.wifi, "power_loss_percent": args.power, "screens": args.screens,
        "polls": all_polls, "polls_by_code": dict(sorted(by["poll"].items())),
        "enrolls_by_code": dict(sorted(by["enroll"].items())), "removed_by_code": dict(sorted(by["remove"].items())),
        "screens_by_code": dict(sorted(by["screen"].items())),
        "screen_changes_s": args.screen_changes if args.screens else None,
        "renderer_answered": fleet.renderer.answered if fleet.renderer else None,
        "boot_by_code": {k: dict(sorted(v.items())) for k, v in sorted(boot.items())},
        "poll_ms": {"p50": percentile(polls_ms, 50), "p99": percentile(polls_ms, 99),
                    "max": max(polls_ms) if polls_ms else None},
        "writes": writes, "writes_total": sum(writes.values()),
        "writes_per_device_hour": {k: n / device_hours for k, n in writes.items()},
        "writes_per_device_hour_total": sum(writes.values()) / device_hours,
        "operator_requests": counted["by_resource"],
        "apiserver_cpu_s": at["end"]["apiserver"] - at["start"]["apiserver"],
        "apiserver_idle_cpu_s_per_min": at["idle"],
        "operator_cpu_s": at["end"]["operator"] - at["start"]["operator"],
        "simulator_cpu_s": at["end"]["own"] - at["start"]["own"],
        "window_s": t1 - t0,
        "operator_hwm_kib": at["end"]["status"]["VmHWM"], "operator_rss_kib": at["end"]["status"]["VmRSS"],
        "operator_rss_start_kib": at["start"]["status"]["VmRSS"],
        "apiserver_hwm_kib": at["end"]["apiserver_status"].get("VmHWM"),
        "apiserver_rss_kib": at["end"]["apiserver_status"].get("VmRSS"),
        "without_token": sum(1 for board in fleet.boards if board.token is None),
        "errors": dict(errors), "refusals": dict(refusals),
        "datastore": "kine" if kine.on_kine(b.cluster_dir) else "etcd",
        "kine": kine.figures(b.cluster_dir, at["start"]["kine"], at["end"]["kine"], t1 - t0),
    }
    return f


def codes(counter):
    return " ".join(f"{k}:{v}" for k, v in counter.items()) or "none"


def line(f, args):
    ms = f["poll_ms"]
    fmt = (lambda x: "-" if x is None else f"{x:.1f}")
    if not args.screens:
        screens = "screens off"
    elif not f["screens_by_code"]:
        screens = "screens: none requested (no poll named a screen)"
    else:
        s = f["screens_by_code"]
        share = 100 * s.get(304, 0) / max(1, sum(s.values()))
        screens = (f"screens requested {sum(s.values())}, 304 {share:.1f} % ({codes(s)}; the picture changes every "
                   f"{f['screen_changes_s'] / 3600:g} h simulated; the renderer answered {f['renderer_answered']})")
    per = ", ".join(f"{k} {v:.2f}" for k, v in sorted(f["writes_per_device_hour"].items())) or "none"
    return (f"fleet: boards {f['boards']} ({f['booted']} booted when the steady phase began, {f['without_token']} without a token at the end; "
            f"{f['mutations']} Mutations x {f['variants']} variants), "
            f"compress {f['compress']:g} (interval {f['interval_s'] / 60:g}m = {f['real_interval_s']:.1f} s real), "
            f"steady {f['minutes']:g} min = {f['simulated_hours']:g} h simulated; "
            f"boot enrolls ({codes(f['boot_by_code'].get('enroll', {}))}); "
            f"polls {f['polls']} ({codes(f['polls_by_code'])}), enrolls ({codes(f['enrolls_by_code'])}), "
            f"errors {sum(f['errors'].values())}; "
            f"poll p50 {fmt(ms['p50'])} p99 {fmt(ms['p99'])} max {fmt(ms['max'])} ms; {screens}; "
            f"operator writes per device-hour {f['writes_per_device_hour_total']:.3f} ({per}; "
            f"{f['polled']} boards that polled); "
            f"API server CPU {f['apiserver_cpu_s']:.1f} s (idle {f['apiserver_idle_cpu_s_per_min']:.1f} s/min "
            f"before the boards; RSS {f['apiserver_rss_kib'] / 1024:.0f} MiB), operator CPU {f['operator_cpu_s']:.1f} s, "
            f"simulator CPU {f['simulator_cpu_s']:.1f} s of {f['window_s']:.0f} s; "
            f"operator RSS peak {f['operator_hwm_kib'] / 1024:.1f} MiB, settled {f['operator_rss_kib'] / 1024:.1f} MiB "
            f"({f['operator_rss_start_kib'] / 1024:.1f} MiB at the steady phase's start)"
            + (f"; {kine.text(f['kine'])}" if f.get("kine") else ""))


def run(b, args):
    binary = Path(args.binary).resolve() if args.binary else common.BIN
    if not binary.is_file():
        if args.binary:
            die(f"no binary {args.binary}")
        step("cargo build --release (no target/release/mutantops)")
        common.run(["cargo", "build", "--release", "--locked"], cwd=REPO)
    bench.BIN = binary  # the CRDs come from the binary that runs
    bench.start_cluster(b)
    log(f"run dir {b.run_dir}; cluster {b.cluster_dir}")
    b.start_operator("fleet", binary=binary, env={"MUTANT_API_TRUSTED_PROXIES": "127.0.0.1"})
    ns = f"fleet-{common.suffix()}"
    b.create_namespace(ns)
    step(f"{args.mutations} Mutations x {args.variants} variants in namespace {ns}")
    keys = create_mutations(b, args, ns)
    fleet = Fleet("127.0.0.1", b.api_port, ns, args.interval / args.compress, args.wifi / 100, args.power / 100)
    if args.screens:
        fleet.renderer = Renderer(args.screen_changes / args.compress)
        log(f"renderer on {fleet.renderer.ip}:{fleet.renderer.port}, each variant's Service pointed at it")
        for i in range(args.mutations):
            for j in range(args.variants):
                fleet.renderer.point(b, ns, f"m{i}-v{j}")
    wakes = int(args.minutes * 60 / fleet.interval) + 1
    boards = []
    for i in range(args.boards):
        name = f"m{i % args.mutations}"
        boards.append(Board(fleet, i, name, f"v{(i // args.mutations) % args.variants}", keys[name], wakes))
    fleet.boards = boards
    log(f"{sum(1 for x in boards if x.wifi_out)} boards will lose Wi-Fi, {sum(1 for x in boards if x.dark)} power")

    async def remove(board):
        """The owner removes a dark board's record (admin token): its kept token dies."""
        await fleet.request("remove", "DELETE", f"{board.base}/devices/{board.id}",
                            {"Authorization": f"Bearer {b.admin_token}"})

    fleet.on_dark = remove
    api_pid, at = apiserver_pid(b.cluster_dir), {}
    # The API server's own CPU with the Mutations and no board, for comparison.
    idle = cpu_seconds(api_pid)
    time.sleep(IDLE_SECONDS)
    at["idle"] = (cpu_seconds(api_pid) - idle) * 60 / IDLE_SECONDS
    log(f"API server before the boards: {at['idle']:.1f} CPU s/min (over {IDLE_SECONDS} s)")

    def marks(name):
        at[name] = {"t": time.time(), "audit": b.audit_mark(), "apiserver": cpu_seconds(api_pid),
                    "operator": cpu_seconds(b.operator_pid()), "own": own_cpu(),
                    "status": common.proc_status(b.operator_pid()), "apiserver_status": common.proc_status(api_pid),
                    "kine": kine.scrape(b.cluster_dir)}

    started = time.monotonic()
    # Python's cyclic collector walks every object it tracks once they have grown by a quarter,
    # and the run keeps every request it makes (hundreds of thousands): its pauses grew to most
    # of a second, and every request in flight meanwhile was timed that much slower, the
    # simulator's pause counted as the operator's. The run makes few cycles; it collects none.
    gc.collect()
    gc.disable()
    try:
        booted, polled = asyncio.run(drive(b, args, fleet, boards, marks))
    finally:
        gc.enable()
    f = figures(b, args, fleet, booted, polled, at)
    f["wall_s"] = round(time.monotonic() - started, 1)
    f["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    f["commit"] = common.output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], check=False).strip()
    common.write_json(b.path("figures.json"), f)
    with open(b.path("events.jsonl"), "w") as out:
        for e in fleet.events:
            out.write(json.dumps(e.__dict__) + "\n")
    for what in ("errors", "refusals"):
        for k, n in sorted(f[what].items(), key=lambda kv: -kv[1])[:10]:
            log(f"{what[:-1]}: {n} x {k}")
    if args.json:
        common.write_json(args.json, f)
    print(line(f, args), flush=True)


def main(argv):
    args = arguments(argv)
    cluster_dir = Path(os.environ.get("MUTANTOPS_CLUSTER_DIR") or REPO / ".cluster-fleet")
    for shared in (".cluster", ".cluster-bench"):
        if os.path.realpath(cluster_dir) == os.path.realpath(REPO / shared):
            die(f"MUTANTOPS_CLUSTER_DIR is {shared}: the fleet needs a cluster of its own")
    os.environ["MUTANTOPS_CLUSTER_DIR"] = str(cluster_dir)
    b = common.Bench(types.SimpleNamespace(size=False, musl=False, peer=False, curve=False))
    b.keep_cluster = args.keep_cluster
    b.run_dir = REPO / "target/fleet" / time.strftime("run-%Y%m%dT%H%M%S")
    b.run_dir.mkdir(parents=True, exist_ok=True)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        signal.signal(sig, lambda *_, code=code: sys.exit(code))
    rc = 1
    try:
        os.chdir(REPO)
        run(b, args)
        log(f"done in {b.elapsed()} s (logs in {b.run_dir})")
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
        raise
    finally:
        bench.cleanup(b, rc)


if __name__ == "__main__":
    main(sys.argv[1:])
