"""The peer: Argo Rollouts, whose Experiments run ReplicaSets from pod templates side by side,
which is what a Mutation's variants are. Its controller is built once from the Go module proxy
(its go.mod has replace directives, so `go install mod@version` refuses it: the module is
downloaded and built in a copy) and cached with the CRDs its module ships.

It runs on the same cluster with its defaults (all namespaces, leader election on) once the
operator's scale namespace is gone (it watches every ReplicaSet of the cluster, and those of
the scale run would be counted against it), at every point of the scale curve: a fresh
controller each time, idle RSS 5 s after it logs that its Experiment workers started (of the
first one: the idle figure), then n Experiments x V templates created as the Mutations were,
convergence, its requests (user agent rollouts-controller/), VmRSS and VmHWM 10 s after
convergence, or for the last point, N, after the same steady window as the operator's."""

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import converge
import curve
import steady
from common import (LEASE_NS, bytes_mib, die, free_port, joined, kib_mib, log, met, num, number, per_minute,
                    proc_status, ratio, row, run, step, suffix, write_json)

VERSION = "v1.10.2"
GO = "go1.26.10"  # its go.mod asks for a newer Go than the machine's
DIR = Path(os.environ.get("MUTANTOPS_CACHE") or Path.home() / ".cache/mutantops") / f"argo-rollouts-{VERSION}"
CONTROLLER = DIR / "rollouts-controller"


def build(b):
    """The controller and its CRDs into DIR, once."""
    if CONTROLLER.is_file() and (DIR / "crds").is_dir():
        return
    if not shutil.which("go"):
        die("go is missing (the peer is built from the Go module proxy)")
    step(f"building the peer, Argo Rollouts {VERSION}, with {GO} (once; cached in {DIR})")
    work, started = Path(f"{DIR}.build-{os.getpid()}"), time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = dict(os.environ, GOTOOLCHAIN=GO)
    p = subprocess.run(["go", "mod", "download", "-json", f"github.com/argoproj/argo-rollouts@{VERSION}"],
                       stdout=subprocess.PIPE, text=True, env=dict(env, GOFLAGS="-mod=mod"))
    if p.returncode:
        die(f"could not download github.com/argoproj/argo-rollouts@{VERSION}")
    shutil.copytree(json.loads(p.stdout)["Dir"], work / "src")
    run(["chmod", "-R", "u+w", work / "src"])
    with open(b.path("peer-build.log"), "w") as out:
        go = subprocess.Popen(["go", "build", "-trimpath", "-ldflags=-s -w", "-o", str(work / "rollouts-controller"),
                               "./cmd/rollouts-controller"], cwd=work / "src", env=env, stdout=out, stderr=subprocess.STDOUT)
    while True:
        try:
            go.wait(timeout=15)
            break
        except subprocess.TimeoutExpired:
            log(f"still building the peer ({int(time.monotonic() - started)} s)")
    if go.returncode:
        die(f"building the peer failed: see {b.path('peer-build.log')}")
    (work / "crds").mkdir()
    for f in (work / "src/manifests/crds").glob("*-crd.yaml"):
        shutil.copy(f, work / "crds")
    shutil.rmtree(work / "src")
    shutil.rmtree(DIR, ignore_errors=True)
    work.rename(DIR)
    log(f"built the peer in {int(time.monotonic() - started)} s")


def start(b, name):
    """The controller with its defaults, until it logs that its Experiment workers started
    (informers synced, lease taken)."""
    logfile = b.path(f"peer-{name}.log")
    with open(logfile, "w") as out:
        b.peer = subprocess.Popen([str(CONTROLLER), "--kubeconfig", os.environ["KUBECONFIG"],
                                   "--metricsport", str(b.peer_ports[0]), "--healthzPort", str(b.peer_ports[1])],
                                  env=dict(os.environ, POD_NAMESPACE=LEASE_NS), stdout=out, stderr=subprocess.STDOUT)
    for _ in range(1200):
        if "Started Experiment workers" in logfile.read_text(errors="replace"):
            return
        if b.peer.poll() is not None:
            die(f"the peer exited: see {logfile}")
        time.sleep(0.1)
    die(f"the peer did not start its Experiment workers within 120s: see {logfile}")


def stop(b):
    if b.peer is None:
        return
    b.peer.terminate()
    try:
        b.peer.wait(timeout=10)
    except subprocess.TimeoutExpired:
        b.peer.kill()
        b.peer.wait()
    b.peer = None


def status(b, record):
    st = proc_status(b.peer.pid)
    write_json(record, st)
    return st


def measure(b):
    R = b.R
    R["peer"] = "skipped"
    if not b.DO_PEER:
        return
    build(b)
    R["size_peer"] = str(CONTROLLER.stat().st_size)
    b.peer_ports = (free_port(), free_port())
    if b.scale_ns:
        step(f"deleting the scale namespace {b.scale_ns} before the peer runs (waiting for it to go)")
        b.delete_namespace(b.scale_ns, 600)
    step(f"the peer: Argo Rollouts {VERSION} ({CONTROLLER})")
    for f in sorted((DIR / "crds").glob("*.yaml")):
        if b.kubectl("apply", "--server-side", "--force-conflicts", "-f", f, check=False).returncode:
            die(f"could not apply {f}")
    for i, n in enumerate([*curve.points(b), b.N]):
        start(b, "idle" if i == 0 else str(n))
        time.sleep(5)
        if i == 0:
            st = status(b, b.path("peer-idle.json"))
            R["peer_idle_rss"], R["peer_idle_hwm"] = str(st["VmRSS"]), str(st["VmHWM"])
            log(f"peer idle: VmRSS {R['peer_idle_rss']} KiB")
        point(b, n)
        stop(b)
    R["peer"] = "measured"


def point(b, n):
    """n Experiments: results in R[peer_<n>_*], for N in R[peer_*] as before the curve."""
    R, last, timeout = b.R, n == b.N, b.PEER_TIMEOUT
    key = "peer_" if last else f"peer_{n}_"
    ns = f"bench-peer-{suffix()}" if last else f"bench-peer-{n}-{suffix()}"
    folder = b.path("peer" if last else f"peer-{n}")
    step(f"the peer at {n} Experiments x {b.V} templates in namespace {ns}")
    b.create_namespace(ns)
    res = converge.point(b, "experiments", ns, n, folder, timeout)
    req = res["requests"]
    R[key + "converged"] = num(res["converged"])
    R[key + "sets"] = num(res["replicasets"]) if res["replicasets"] is not None \
        else f"not within {timeout} s ({res['replicasets_count']}/{n * b.V})"
    R[key + "running"] = num(res["running"]) if res["running"] is not None \
        else f"not within {timeout} s ({res['running_count']}/{n})"
    R[key + "requests"] = str(req["total"])
    if last:
        R["peer_by_verb"], R["peer_by_res"] = joined(req["by_verb"]), joined(req["by_resource"])
    log(f"peer: ReplicaSets after {R[key + 'sets']} s, all Running after {R[key + 'running']} s; "
        f"{R[key + 'requests']} requests")
    if last:
        req = steady.window(b, "rollouts-controller/", folder / "requests-steady.json")
        R["peer_steady"] = per_minute(sum(req["by_verb"].values()), b.STEADY_SECONDS)
    else:
        time.sleep(10)
    st = status(b, folder / "rss.json")
    R[key + "rss"], R[key + "hwm"] = str(st["VmRSS"]), str(st["VmHWM"])
    if last:
        log(f"peer steady: VmRSS {R['peer_rss']} KiB, {R['peer_steady']} requests/min")
    else:
        log(f"peer at {n}: VmRSS {R[key + 'rss']} KiB, VmHWM {R[key + 'hwm']} KiB")
        b.delete_namespace(ns, 180)


# --- the rows -------------------------------------------------------------------------------------

RSS_RATIO_TARGET = 0.1  # mutantops at most a tenth of the peer's RSS, at every point


def awk_number(x):
    """As awk prints a number: whole ones whole, others with 6 significant digits."""
    return str(int(x)) if float(x).is_integer() else f"{x:.6g}"


def maybe_ratio(a, b):
    """ " (a / b in %)" when both are numbers (a time may read "not within ...")."""
    try:
        return f" ({ratio(float(a), float(b))})"
    except ValueError:
        return ""


def rss_row(b, label, ours, theirs, anon, file):
    """The RSS of both at a point, judged: where it is missed, what mutantops' RSS is made of
    (the binary's file pages dominate at small scales) beside its idle figure."""
    R = b.R
    ok = number(ours) <= RSS_RATIO_TARGET * number(theirs)
    value = f"{kib_mib(ours)} / {kib_mib(theirs)} ({ratio(ours, theirs)})"
    if not ok and R.get(file):
        value += (f"; mutantops: {kib_mib(R[file])} file pages + {kib_mib(R[anon])} anon "
                  f"(idle {kib_mib(R['idle_rss'])}: {kib_mib(R['idle_file'])} file pages)")
    return row(label, value, f"≤ {RSS_RATIO_TARGET * 100:.0f}%", met(ok))


def rows(b):
    """The peer beside the operator: the same figure for each, and mutantops / peer."""
    R, N, V, s = b.R, b.N, b.V, b.STEADY_SECONDS
    if R.get("peer", "skipped") != "measured":
        yield row(f"peer (Argo Rollouts {VERSION})", "skipped (--no-peer)", "-", "-")
        return
    size, build_name = R.get("size_musl_x86_64"), "static musl x86_64"
    if not size:
        size, build_name = R["size_dyn"], "dynamic x86_64"
    yield row(f"peer: binary size, mutantops ({build_name}) / rollouts-controller (stripped)",
              f"{bytes_mib(size)} / {bytes_mib(R['size_peer'])} ({ratio(size, R['size_peer'])})", "-", "-")
    yield row("peer: idle RSS, mutantops / rollouts-controller (VmRSS)",
              f"{kib_mib(R['idle_rss'])} / {kib_mib(R['peer_idle_rss'])} ({ratio(R['idle_rss'], R['peer_idle_rss'])})",
              "-", "-")
    for n in b.CURVE:
        p, c = f"peer_{n}_", f"curve_{n}_"
        if not R.get(p + "rss") or not R.get(c + "rss"):
            continue
        yield rss_row(b, f"peer: RSS at {n}x{V}, 10 s after convergence, mutantops / rollouts-controller (VmRSS)",
                      R[c + "rss"], R[p + "rss"], c + "anon", c + "file")
        yield row(f"peer: at {n}x{V}, mutantops / rollouts-controller: peak RSS (VmHWM); all {n} owners ready; "
                  "requests to converge",
                  f"{kib_mib(R[c + 'hwm'])} / {kib_mib(R[p + 'hwm'])} ({ratio(R[c + 'hwm'], R[p + 'hwm'])}); "
                  f"{R[c + 'ready']} s / {R[p + 'running']} s{maybe_ratio(R[c + 'ready'], R[p + 'running'])}; "
                  f"{R[c + 'requests']} / {R[p + 'requests']} ({ratio(R[c + 'requests'], R[p + 'requests'])})", "-", "-")
    yield rss_row(b, f"peer: RSS at {N}x{V}, {s} s after convergence, mutantops / rollouts-controller (VmRSS)",
                  R["scale_rss"], R["peer_rss"], "scale_anon", "scale_file")
    yield row(f"peer: peak RSS at {N}x{V}, mutantops / rollouts-controller (VmHWM)",
              f"{kib_mib(R['conv_hwm'])} / {kib_mib(R['peer_hwm'])} ({ratio(R['conv_hwm'], R['peer_hwm'])})", "-", "-")
    ours, theirs = R["conv_deps"].removesuffix(" s"), R["peer_sets"]
    yield row(f"peer: all {N * V} workloads written: Deployments / ReplicaSets",
              f"{R['conv_deps']} / {theirs} s{maybe_ratio(ours, theirs)}", "-", "-")
    yield row(f"peer: all {N} owners ready: Mutations Ready / Experiments Running",
              f"{R['conv_ready']} s / {R['peer_running']} s{maybe_ratio(R['conv_ready'], R['peer_running'])}", "-", "-")
    yield row("peer: requests to converge, mutantops / rollouts-controller (not watches, not leases)",
              f"{R['conv_requests']} / {R['peer_requests']} ({ratio(R['conv_requests'], R['peer_requests'])})", "-", "-")
    yield row("peer: steady-state requests per minute, mutantops / rollouts-controller (not leases)",
              f"{awk_number(number(R['steady_writes']) + number(R['steady_reads']))} / {R['peer_steady']}", "-", "-")
