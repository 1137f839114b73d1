"""The scale run: N Mutations x V variants (instances 0) created at once on a fresh operator;
convergence (converge.py) and the operator's requests for it, the peak RSS while converging,
the steady state and the RSS after it (steady.py), then a restart with everything in place
(the full list of N Mutations, N*V Deployments and N Secrets, and a reconcile of each): its
peak RSS and requests, repeated (MUTANTOPS_BENCH_RESTARTS) for the spread, the same restarts
with the musl binary, and one under heaptrack (the memory profile, with the unstripped build)."""

import glob
import os
import signal
import subprocess
import time

import converge
import cpu
import profiles
import steady
from common import (HEAP_BIN, HEAP_DIR, MUSL_BIN, REPO, die, joined, log, need, num, step, suffix, tail, tenths,
                    write_json)


def measure(b):
    R, N, V = b.R, b.N, b.V
    ns = f"bench-scale-{suffix()}"
    step(f"scale: {N} Mutations x {V} variants (instances 0) in namespace {ns}")
    b.create_namespace(ns)
    b.scale_ns = ns
    b.start_operator("scale")
    time.sleep(2)
    res = converge.point(b, "mutations", ns, N, b.path("scale"), b.TIMEOUT)
    R["apply_s"] = res["apply_s"]
    R["cpu_writes"] = cpu.text(res["cpu_writes"], os.cpu_count()) if res["cpu_writes"] else "-"
    R["cpu_all"] = cpu.text(res["cpu_all"], os.cpu_count())
    log(f"CPU while the operator wrote: {R['cpu_writes']}")
    R["converged"] = num(res["converged"])
    if res["converged"]:
        R["conv_deps"], R["conv_observed"] = f"{num(res['deployments'])} s", f"{num(res['observed'])} s"
        R["conv_ready"] = num(res["ready"])
        R["conv_lag"] = num(tenths(res["ready"] - res["observed"]))
        log(f"converged: Deployments after {R['conv_deps']}, observed by the Deployment controller after "
            f"{R['conv_observed']}, every Mutation Ready after {R['conv_ready']} s")
    else:
        R["conv_deps"] = converge.since(res, "deployments", N * V, b.TIMEOUT)
        R["conv_observed"] = converge.since(res, "observed", N * V, b.TIMEOUT)
        R["conv_ready"] = str(b.TIMEOUT)
        R["conv_ready_text"] = f"not within {b.TIMEOUT} s ({res['ready_count']}/{N} Ready)"
        R["conv_lag"] = "-"
        log(f"NOT converged within {b.TIMEOUT} s; measuring the rest anyway (the steady state is then not steady)")
    req = res["requests"]
    R["conv_requests"] = str(req["total"])
    R["conv_by_verb"], R["conv_by_res"] = joined(req["by_verb"]), joined(req["by_resource"])
    secrets = b.kubectl("-n", ns, "get", "secrets", "-l", "mutantops.neiam.org/kind=mutation", "-o", "name",
                        stdout=subprocess.PIPE, text=True).stdout
    R["secrets"] = str(len(secrets.splitlines()))
    R["conv_hwm"] = str(b.operator_status("rss-converged.json")["VmHWM"])

    steady.measure(b)

    step(f"restart with everything in place, {b.RESTARTS} times: initial list of {N} Mutations, "
         f"{N * V} Deployments, {N} Secrets")
    b.stop_operator()
    rss, hwm = [], []
    for i in range(b.RESTARTS):
        start = b.audit_mark()
        ready_s = b.start_operator("relist")
        b.wait_reconciled(N, 300)
        end = b.audit_mark()
        st = b.operator_status(f"rss-relist-{i + 1}.json")
        rss.append(st["VmRSS"])
        hwm.append(st["VmHWM"])
        if i == 0:
            # Every restart makes the same requests: the first one's are counted.
            R["relist_ready_s"] = ready_s
            req = b.requests(start, end, b.path("requests-relist.json"))
            R["relist_requests"], R["relist_detail"] = str(req["total"]), joined(req["by_resource"])
        log(f"relist {i + 1}: ready after {ready_s} s; VmRSS {st['VmRSS']} KiB, VmHWM {st['VmHWM']} KiB")
        b.stop_operator()
    spread(R, "relist", rss, hwm)
    log(f"relist: {R['relist_requests']} requests ({R['relist_detail']})")

    # The same restarts with the x86_64 musl binary, and its RSS once it has settled as long
    # as the glibc one had (the reconciles done, 3 s still).
    if R["musl"] == "measured":
        step(f"the same restart with the musl binary ({MUSL_BIN}), {b.RESTARTS} times")
        rss, hwm = [], []
        for i in range(b.RESTARTS):
            b.start_operator("relist-musl", binary=MUSL_BIN)
            b.wait_reconciled(N, 300)
            st = b.operator_status(f"rss-relist-musl-{i + 1}.json")
            rss.append(st["VmRSS"])
            hwm.append(st["VmHWM"])
            log(f"relist (musl) {i + 1}: VmRSS {st['VmRSS']} KiB, VmHWM {st['VmHWM']} KiB")
            b.stop_operator()
        spread(R, "musl_relist", rss, hwm)

    R["profile"] = "skipped"
    if b.PROFILE and b.DO_SIZE and need("heaptrack", "heaptrack", optional=True):
        heap_profile(b)


def spread(R, prefix, rss, hwm):
    """The worst of the restarts in R[<prefix>_rss] and R[<prefix>_hwm] (what the targets
    judge), every run's figure in R[<prefix>_rss_runs] and R[<prefix>_hwm_runs]."""
    R[f"{prefix}_rss"], R[f"{prefix}_hwm"] = str(max(rss)), str(max(hwm))
    R[f"{prefix}_rss_runs"] = " ".join(str(k) for k in rss)
    R[f"{prefix}_hwm_runs"] = " ".join(str(k) for k in hwm)


def heap_profile(b):
    step(f"memory profile of the same restart: heaptrack on an unstripped build with the system's malloc ({HEAP_BIN})")
    # heaptrack sees malloc; the release binary allocates with dlmalloc, whose heap it does
    # not see: the same source, built with the feature that keeps malloc.
    with open(b.path("heap-build.log"), "w") as out:
        if subprocess.run(["cargo", "build", "--release", "--locked", "--features", "system-allocator"], cwd=REPO,
                          stdout=out, stderr=subprocess.STDOUT,
                          env=dict(os.environ, CARGO_PROFILE_RELEASE_STRIP="false",
                                   CARGO_TARGET_DIR=str(HEAP_DIR))).returncode:
            tail(b.path("heap-build.log"), 30)
            die("the memory profile's build failed")
    b.start_operator("heaptrack", ["heaptrack", "-o", b.path("heaptrack")], HEAP_BIN)
    b.wait_reconciled(b.N, 600)
    # KILL, not TERM: what heaptrack then reports as leaked is what was live at this
    # moment (a clean shutdown would free the caches first).
    # heaptrack's script then finishes writing and exits by itself: a TERM to it would
    # stop its writer too, so wait for it.
    b.kill_operator(signal.SIGKILL)
    b.operator.wait()
    b.operator = None
    for cost in ("peak", "leaked"):
        with open(b.path(f"heaptrack-{cost}.log"), "w") as out:
            p = subprocess.run(["heaptrack_print", "--print-flamegraph", str(b.path(f"heaptrack-{cost}.txt")),
                                "--flamegraph-cost-type", cost, *sorted(glob.glob(os.path.join(b.run_dir, "heaptrack.*zst")))],
                               stdout=out, stderr=subprocess.STDOUT)
        if p.returncode:
            die(f"heaptrack_print failed: see {b.path(f'heaptrack-{cost}.log')}")
    write_json(b.path("heap.json"), profiles.heap(b.path("heaptrack-peak.txt"), b.path("heaptrack-leaked.txt")))
    b.R["profile"] = "measured"
