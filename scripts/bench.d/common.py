"""What the steps of scripts/bench share (standard library only): the run's settings and its
results, logging, commands (kubectl, apt-get), the operator's process (start, /readyz, stop,
/proc), and the figures' number formats.

Every step is a function of one `Bench`, which holds the settings and the results `R`: text
values by key, written to the run directory's results.json, which `--report` renders again.
"""

import http.client
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import audit

REPO = Path(__file__).resolve().parents[2]
BIN = REPO / "target/release/mutantops"
STATIC_DIR = Path(os.environ.get("MUTANTOPS_STATIC_TARGET_DIR") or REPO / "target/static")
STATIC_BIN = STATIC_DIR / "x86_64-unknown-linux-gnu/release/mutantops"
MUSL_BIN = REPO / "target/musl/x86_64-unknown-linux-musl/mutantops"
BLOAT_DIR = Path(os.environ.get("MUTANTOPS_BLOAT_TARGET_DIR") or REPO / "target/bloat")
SYM_BIN = BLOAT_DIR / "release/mutantops"
# The memory profile's build: unstripped, with the system's malloc (feature system-allocator),
# which heaptrack sees and dlmalloc is not.
HEAP_DIR = Path(os.environ.get("MUTANTOPS_HEAP_TARGET_DIR") or REPO / "target/heap")
HEAP_BIN = HEAP_DIR / "release/mutantops"
LEASE_NS = "mutantops-bench"

# Settings from the environment (MUTANTOPS_BENCH_<name>), as scripts/bench's header lists them;
# the ones a report needs are saved with the results.
SETTINGS = ["N", "V", "PARALLEL", "STEADY_SECONDS", "WRK_SECONDS", "WRITES", "STARTS", "TIMEOUT", "RESTARTS",
            "DO_SIZE", "DO_MUSL", "DO_PEER", "DO_CURVE", "CURVE", "DO_CAPACITY", "CAPACITY"]
ENV_NAMES = {"N": "MUTATIONS", "V": "VARIANTS"}


# What the lines of log(), step() and die() start with: the script that runs (scripts/fleet
# sets its own).
PREFIX = "bench"


def log(msg):
    print(f"[{PREFIX} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def step(msg):
    print(f"\n[{PREFIX} {time.strftime('%H:%M:%S')}] ==> {msg}", file=sys.stderr, flush=True)


def die(msg):
    print(f"[{PREFIX}] error: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def tail(path, lines):
    """The last lines of a log, to stderr (before a die that points at it)."""
    try:
        sys.stderr.write("".join(Path(path).read_text(errors="replace").splitlines(True)[-lines:]))
    except OSError:
        pass


# --- numbers as the table shows them ------------------------------------------------------------


def jq_round(x):
    """Half away from zero, as jq's round."""
    return math.copysign(math.floor(abs(x) + 0.5), x)


def tenths(x):
    return jq_round(x * 10) / 10


def num(x):
    """A JSON value as jq -r prints it: 92.0 as 92, None as null."""
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e17:
        return str(int(x))
    return str(x)


def joined(counts):
    """{"create deployments": 5000, ...} as "create deployments 5000, ..."."""
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def per_minute(count, seconds):
    return num(tenths(count * 60 / seconds))


def row(figure, measured, target, result):
    return (figure, measured, target, result)


def kib_mib(kib):
    return f"{float(kib) / 1024:.1f} MiB"


# Memory at 1000 x 5 (R50), for the glibc and the musl binary alike.
SCALE_RSS_TARGET_KIB = 20 * 1024   # after converging, and after a restart settled
PEAK_RSS_TARGET_KIB = 28 * 1024    # while converging, and a restart's


def runs_mib(runs):
    """A run's repeated figures (KiB, space-separated) as "a, b, c MiB", or "" without them."""
    return ", ".join(f"{float(k) / 1024:.1f}" for k in runs.split()) + " MiB" if runs else ""


def restarts(R, name, prefix):
    """A restart's peak and settled RSS (`prefix`_hwm, _rss): the worst of the run's restarts,
    and each of them (_hwm_runs, _rss_runs) when there were several. `name` heads the rows."""
    hwm, rss = R.get(f"{prefix}_hwm_runs", ""), R.get(f"{prefix}_rss_runs", "")
    n = len(hwm.split())
    worst = f", the worst of {n} restarts" if n > 1 else ""
    yield row(f"{name}peak RSS of a restart: full list + reconcile of all (VmHWM{worst})",
              kib_mib(R[f"{prefix}_hwm"]) + (f" ({runs_mib(hwm)})" if n > 1 else ""), "≤ 28 MiB",
              met(le(R[f"{prefix}_hwm"], PEAK_RSS_TARGET_KIB)))
    yield row(f"{name}RSS after that restart settled (VmRSS{worst})",
              kib_mib(R[f"{prefix}_rss"]) + (f" ({runs_mib(rss)})" if n > 1 else ""), "≤ 20 MiB",
              met(le(R[f"{prefix}_rss"], SCALE_RSS_TARGET_KIB)))


def bytes_mib(b):
    return f"{float(b) / 1048576:.2f} MiB"


def met(ok):
    return "met" if ok else "MISSED"


def number(x):
    """A figure as a number (text as awk reads it: what is not a number counts as 0)."""
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def le(a, b):
    return number(a) <= number(b)


def ge(a, b):
    return number(a) >= number(b)


def ratio(a, b):
    """a / b as a percentage with no decimals."""
    a, b = number(a), number(b)
    return f"{100 * a / b if b > 0 else 0:.0f}%"


# --- commands ---------------------------------------------------------------------------------


def run(cmd, check=True, **kw):
    """A command, its output to stderr unless redirected; exits the run if it fails."""
    kw.setdefault("stdout", sys.stderr)
    try:
        p = subprocess.run([str(c) for c in cmd], check=False, **kw)
    except FileNotFoundError:
        p = subprocess.CompletedProcess(cmd, 127, "", "")
    if check and p.returncode != 0:
        die(f"{Path(str(cmd[0])).name} failed (exit {p.returncode}): {' '.join(map(str, cmd))[:300]}")
    return p


def output(cmd, check=True, **kw):
    """A command's standard output as text."""
    kw.setdefault("stderr", subprocess.DEVNULL)
    p = run(cmd, check=check, stdout=subprocess.PIPE, text=True, **kw)
    return p.stdout


_apt_updated = False


def need(command, package, optional=False):
    """COMMAND on PATH, or Debian package PACKAGE installed for it (as root, with apt-get)."""
    global _apt_updated
    if shutil.which(command):
        return True
    if os.getuid() == 0 and shutil.which("apt-get"):
        log(f"installing Debian package {package} (for {command})")
        if not _apt_updated:
            subprocess.run(["apt-get", "update", "-qq"], stdout=sys.stderr, check=False)
            _apt_updated = True
        p = subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", package],
                           stdout=sys.stderr, env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"))
        if p.returncode == 0:
            return True
    if optional:
        return False
    die(f"{command} is missing: install Debian package {package}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(url, timeout=1.0):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("GET", u.path or "/")
        r = c.getresponse()
        r.read()
        return r.status
    except OSError:
        return None
    finally:
        c.close()


def proc_status(pid):
    """VmRSS, VmHWM, RssAnon, RssFile (KiB) and Threads of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                out[k] = int(v.split()[0])
    return out


def memory(R, prefix, st):
    """R[<prefix>rss], ...hwm, ...anon, ...file: VmRSS, VmHWM, RssAnon, RssFile (KiB)."""
    for key, field in (("rss", "VmRSS"), ("hwm", "VmHWM"), ("anon", "RssAnon"), ("file", "RssFile")):
        R[prefix + key] = str(st[field])


def write_json(path, value):
    Path(path).write_text(json.dumps(value) + "\n")


def positive(name, text):
    if not text.isdigit() or text.startswith("0"):
        die(f"MUTANTOPS_BENCH_{name}={text} must be a positive whole number")
    return int(text)


def suffix():
    """A namespace's random suffix, as bash's $RANDOM."""
    return random.randint(0, 32767)


# --- the run ----------------------------------------------------------------------------------


class Bench:
    """The settings, the results R, and what runs: the operator, the peer, the cluster."""

    def __init__(self, flags):
        env = os.environ
        for name in ("N", "V", "PARALLEL", "STEADY_SECONDS", "WRK_SECONDS", "WRITES", "STARTS", "TIMEOUT",
                     "RESTARTS"):
            default = {"N": "1000", "V": "5", "PARALLEL": "4", "STEADY_SECONDS": "60", "WRK_SECONDS": "10",
                       "WRITES": "100", "STARTS": "5", "TIMEOUT": "480", "RESTARTS": "3"}[name]
            key = ENV_NAMES.get(name, name)
            setattr(self, name, positive(key, env.get(f"MUTANTOPS_BENCH_{key}", default)))
        self.PEER_TIMEOUT = positive("PEER_TIMEOUT", env.get("MUTANTOPS_BENCH_PEER_TIMEOUT", str(2 * self.TIMEOUT)))
        self.PROFILE = env.get("MUTANTOPS_BENCH_PROFILE", "1") != "0"
        self.CURVE = [positive("CURVE", w) for w in env.get("MUTANTOPS_BENCH_CURVE", "10 100").split()]
        self.DO_SIZE, self.DO_MUSL = int(flags.size), int(flags.musl)
        self.DO_PEER, self.DO_CURVE = int(flags.peer), int(flags.curve)
        self.DO_CAPACITY = int(getattr(flags, "capacity", False))
        self.CAPACITY = [positive("CAPACITY", w) for w in env.get("MUTANTOPS_BENCH_CAPACITY", "500 2000 5000").split()]
        self.cluster_dir = Path(env.get("MUTANTOPS_CLUSTER_DIR") or REPO / ".cluster-bench")
        os.environ["MUTANTOPS_CLUSTER_DIR"] = str(self.cluster_dir)
        if os.path.realpath(self.cluster_dir) == os.path.realpath(REPO / ".cluster"):
            die("MUTANTOPS_CLUSTER_DIR is the shared .cluster: the benchmarks need a cluster of their own")
        if self.N > 9999:
            die("MUTANTOPS_BENCH_MUTATIONS must be at most 9999")
        if self.WRITES > 9999:
            die("MUTANTOPS_BENCH_WRITES must be at most 9999")
        self.R = {}
        self.started = time.monotonic()
        self.run_dir = None
        self.operator = None       # the operator process running, if any (Popen)
        self.op_count = 0
        self.peer = None           # the peer's controller, while it runs (Popen)
        self.cluster_started = False
        self.namespaces = []       # namespaces this run created
        self.kubectl_bin = None    # scripts/cluster's kubectl, its audit log, a client (kube.Kube)
        self.audit_log = None
        self.kube = None
        self.scale_ns = None
        self.api_port, self.metrics_port = free_port(), free_port()
        self.admin_token = os.urandom(32).hex()

    def elapsed(self):
        return int(time.monotonic() - self.started)

    def settings(self):
        return {k: getattr(self, k) for k in SETTINGS}

    def path(self, *parts):
        return self.run_dir.joinpath(*parts)

    # --- the audit log -----------------------------------------------------------------------------

    def audit_mark(self):
        return audit.mark(self.audit_log)

    def requests(self, start, end, record, agent="mutantops/"):
        """A client's requests between two marks (audit.count), also written to `record`."""
        counted = audit.count(self.audit_log, start, end, agent)
        write_json(record, counted)
        return counted

    # --- kubectl -------------------------------------------------------------------------------

    def kubectl(self, *args, check=True, **kw):
        kw.setdefault("stdout", subprocess.DEVNULL)
        return run([self.kubectl_bin, *args], check=check, **kw)

    def create_namespace(self, ns):
        if self.kubectl("get", "namespace", ns, check=False, stderr=subprocess.DEVNULL).returncode == 0:
            return
        self.kubectl("create", "namespace", ns)
        self.namespaces.append(ns)
        # The operator watches every namespace; its HTTP API serves those labelled for it.
        self.kubectl("label", "namespace", ns, "mutantops.neiam.org/api=enabled")

    def delete_namespace(self, ns, timeout):
        """Deletes a namespace and waits for it to go (its objects must not load the control
        plane in what is measured next)."""
        if self.kubectl("delete", "namespace", ns, f"--timeout={timeout}s", check=False).returncode != 0:
            log(f"warning: namespace {ns} was not gone within {timeout}s")

    def create_parts(self, folder, count, logs=None):
        """`kubectl create -f` of folder/part-0.json ... in parallel; waits for all."""
        logs = logs or folder
        procs = []
        for k in range(count):
            with open(Path(logs) / f"apply-{k}.log", "w") as out:
                procs.append(subprocess.Popen([str(self.kubectl_bin), "create", "-f", str(Path(folder) / f"part-{k}.json")],
                                              stdout=out, stderr=subprocess.STDOUT))
        if any(p.wait() != 0 for p in procs):
            die(f"kubectl create failed: see {logs}/apply-*.log")

    # --- the operator ----------------------------------------------------------------------------

    def start_operator(self, name, prefix=(), binary=None, env=None):
        """Starts the release binary (or `binary`) with the bench's settings, behind `prefix`
        (e.g. taskset -c 0); waits for /readyz 200 and returns the seconds that took."""
        self.op_count += 1
        logfile = self.path(f"operator-{self.op_count}-{name}.log")
        e = dict(os.environ, POD_NAMESPACE=LEASE_NS, POD_NAME=f"bench-{self.op_count}", RUST_LOG="info",
                 MUTANT_API_ADDR=f"127.0.0.1:{self.api_port}", MUTANT_METRICS_ADDR=f"127.0.0.1:{self.metrics_port}",
                 MUTANT_API_TOKEN=self.admin_token, **(env or {}))
        start = time.time()
        with open(logfile, "w") as out:
            self.operator = subprocess.Popen([str(c) for c in (*prefix, binary or BIN)], env=e,
                                             stdout=out, stderr=subprocess.STDOUT)
        while time.time() - start < 120:
            if http_status(f"http://127.0.0.1:{self.metrics_port}/readyz") == 200:
                return f"{time.time() - start:.2f}"
            if self.operator.poll() is not None:
                die(f"the operator ({name}) exited; see {logfile}")
            time.sleep(0.02)
        die(f"the operator ({name}) was not ready after 120s; see {logfile}")

    def operator_pid(self):
        """The pid of the operator itself, also when it was started under a wrapper (heaptrack's
        shell script runs it beside its own helper processes): the first process, breadth
        first from the one started, whose executable is a mutantops binary."""
        queue = [self.operator.pid]
        while queue:
            pid = queue.pop(0)
            try:
                if os.readlink(f"/proc/{pid}/exe").endswith("/mutantops"):
                    return pid
            except OSError:
                pass
            for t in Path(f"/proc/{pid}/task").glob("*/children"):
                try:
                    queue += [int(c) for c in t.read_text().split()]
                except OSError:
                    pass
        return self.operator.pid

    def kill_operator(self, sig):
        try:
            os.kill(self.operator_pid(), sig)
        except OSError:
            pass

    def stop_operator(self):
        if self.operator is None:
            return
        # The operator itself, not a wrapper such as heaptrack's shell script; then the wrapper.
        self.kill_operator(signal.SIGTERM)
        try:
            self.operator.wait(timeout=30)
        except subprocess.TimeoutExpired:
            log(f"the operator (pid {self.operator.pid}) ignored TERM for 30s; killing it")
            self.kill_operator(signal.SIGKILL)
            self.operator.kill()
            self.operator.wait()
        self.operator = None

    def operator_status(self, record):
        """The operator's /proc status, also written to the run directory as `record`."""
        st = proc_status(self.operator_pid())
        write_json(self.path(record), st)
        return st

    def reconciled(self):
        """The operator's count of finished Mutation reconciles (ok + error)."""
        c = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=5)
        try:
            c.request("GET", "/metrics")
            text = c.getresponse().read().decode()
        except OSError:
            return 0
        finally:
            c.close()
        return sum(float(line.split()[1]) for line in text.splitlines()
                   if line.startswith('mutant_operator_reconciliations_total{kind="Mutation"'))

    def wait_reconciled(self, want, limit):
        """Until `want` Mutation reconciles have finished and the count stayed the same for 3 s
        (the burst is over). Without convergence (the control plane still changes
        Deployments, so reconciles go on) 3 s after `want`."""
        last, stable, deadline = -1, 0, time.monotonic() + limit
        while time.monotonic() < deadline:
            now = self.reconciled()
            if now >= want and (now == last or self.R.get("converged") != "true"):
                stable += 1
                if stable >= 6:
                    return
            else:
                stable = 0
            last = now
            time.sleep(0.5)
        die(f"only {num(float(last))} of {want} Mutation reconciles finished within {limit}s")
