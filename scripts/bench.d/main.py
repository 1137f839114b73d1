"""scripts/bench's driver (scripts/bench runs it; its header says what the run measures and
which flags and variables it takes): the arguments, the cluster, the steps in order, the
results recorded in the run directory, the table and BENCHMARKS.md.

Each measurement is a module of this folder: size.py and musl.py (builds), startup.py,
idle.py, api.py and latency.py (the HTTP API), screens.py (screens from the cache), curve.py, scale.py and steady.py (convergence
at scale), peer.py (Argo Rollouts), capacity.py (scripts/fleet's boards); table.py and report.py write the results
out.
"""

import base64
import json
import os
import shlex
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import api
import capacity
import common
import curve
import idle
import peer
import report
import scale
import screens
import size
import startup
import table
from common import BIN, LEASE_NS, REPO, Bench, die, log, need, output, step
from kube import Kube


def usage():
    """scripts/bench's header, which says what it measures, its flags and variables."""
    text = (REPO / "scripts/bench").read_text().splitlines()[1:]
    for line in text[:next(i for i, t in enumerate(text) if t.startswith("set -euo"))]:
        print(line[2:] if line.startswith("# ") else line.lstrip("#"))


def arguments(argv):
    args = types.SimpleNamespace(keep_cluster=False, size=True, musl=True, peer=True, curve=True, capacity=True,
                                 write=True, report=None)
    words = iter(argv)
    for arg in words:
        if arg == "--keep-cluster":
            args.keep_cluster = True
        elif arg in ("--no-size", "--no-musl", "--no-peer", "--no-curve", "--no-capacity", "--no-write"):
            setattr(args, arg[len("--no-"):], False)
        elif arg == "--report":
            args.report = next(words, None) or die("--report needs a run directory (target/bench/run-...)")
        elif arg in ("-h", "--help"):
            usage()
            sys.exit(0)
        else:
            die(f"unknown argument {arg} (try --help)")
    return args


def start_cluster(b):
    step(f"control plane in {b.cluster_dir}")
    cluster = REPO / "scripts/cluster"
    if subprocess.run([str(cluster), "status"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0:
        log("already running: using it (and leaving it running)")
    else:
        b.cluster_started = True
        with open(b.path("cluster-up.log"), "w") as out:
            if subprocess.run([str(cluster), "up"], stdout=out, stderr=subprocess.STDOUT).returncode:
                common.tail(b.path("cluster-up.log"), 30)
                die("scripts/cluster up failed")
    # `scripts/cluster env` prints `export NAME=VALUE` lines: KUBECONFIG, KUBECTL, MUTANTOPS_AUDIT_LOG.
    for line in output([cluster, "env"], check=False).splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            os.environ[name] = value
    b.kubectl_bin = os.environ.get("KUBECTL", "")
    if not Path(os.environ.get("KUBECONFIG", "")).is_file() or not os.access(b.kubectl_bin, os.X_OK):
        die("scripts/cluster env gave no usable KUBECONFIG/KUBECTL")
    b.audit_log = os.environ.get("MUTANTOPS_AUDIT_LOG") or die("scripts/cluster env exports no MUTANTOPS_AUDIT_LOG")
    config = json.loads(output([b.kubectl_bin, "config", "view", "--raw", "--minify", "-o", "json"]))
    server = config["clusters"][0]["cluster"].get("server", "")
    ca = config["clusters"][0]["cluster"].get("certificate-authority-data", "")
    token = config["users"][0]["user"].get("token", "")
    if not (server and ca and token):
        die("the kubeconfig has no server, CA or token (scripts/cluster writes all three)")
    b.path("ca.crt").write_bytes(base64.b64decode(ca))
    b.kube = Kube(server, str(b.path("ca.crt")), token)
    version = json.loads(output([b.kubectl_bin, "version", "-o", "json"], check=False) or "{}")
    b.R["k8s"] = (version.get("serverVersion") or {}).get("gitVersion") or "null"
    crd = subprocess.run([str(BIN), "crd"], stdout=subprocess.PIPE, check=True).stdout
    b.kubectl("apply", "--server-side", "--field-manager=mutantops-bench", "-f", "-", input=crd)
    # A CRD created a moment ago may have no conditions yet, which `kubectl wait` takes for an
    # error rather than for "not yet": asked again until it says Established or 60 s passed.
    deadline = time.monotonic() + 60
    while b.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd/mutations.neiam.org",
                    "crd/mutantdeployments.neiam.org", check=time.monotonic() > deadline,
                    stderr=subprocess.DEVNULL).returncode:
        time.sleep(0.5)
    b.create_namespace(LEASE_NS)


def cleanup(b, rc):
    """Whatever this run left running: the operator, the peer, and the cluster it started (or
    else the namespaces it created)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    b.stop_operator()
    peer.stop(b)
    if b.cluster_started and not b.keep_cluster:
        log(f"stopping the cluster this run started ({b.cluster_dir})")
        if subprocess.run([str(REPO / "scripts/cluster"), "down"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode:
            log("warning: scripts/cluster down failed")
    elif b.namespaces and b.kubectl_bin:
        log(f"deleting namespaces {' '.join(b.namespaces)} (in the background of the API server)")
        if b.kubectl("delete", "namespace", *b.namespaces, "--ignore-not-found", "--wait=false",
                     check=False, stderr=subprocess.DEVNULL).returncode:
            log(f"warning: could not delete {' '.join(b.namespaces)}")
    if rc != 0:
        log(f"FAILED (exit {rc}) after {b.elapsed()}s; logs in {b.run_dir}")


def load(b, run_dir):
    """The results and settings of an earlier run (results.json)."""
    saved = json.loads((run_dir / "results.json").read_text())
    b.R = saved["R"]
    for k, v in saved["settings"].items():
        setattr(b, k, v)


def record(b):
    R = b.R
    R["wall"] = str(b.elapsed())
    R["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    R["commit"] = output(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], check=False).strip() or "unknown"
    # BENCHMARKS.md is this script's own output: a change to it alone is not a change measured
    R["dirty"] = str(len(output(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no", "--", ".",
                                 ":!BENCHMARKS.md"], check=False).splitlines()))
    R["machine"] = report.machine()
    R["rustc"] = output(["rustc", "--version"], check=False).strip() or "unknown"
    common.write_json(b.path("results.json"), {"R": R, "settings": b.settings()})


def measure(b):
    for command, package in (("openssl", "openssl"), ("wrk", "wrk"), ("taskset", "util-linux"), ("strip", "binutils")):
        need(command, package)
    log(f"run dir {b.run_dir}; scale {b.N} x {b.V}; cluster {b.cluster_dir}")
    size.measure(b)
    b.R["build_s"] = str(b.elapsed())
    # Before the bench's own control plane: the fleet's runs have the cores to themselves.
    capacity.measure(b)
    start_cluster(b)
    startup.measure(b)
    idle.measure(b)
    api.measure(b)
    screens.measure(b)
    curve.measure(b)
    scale.measure(b)
    peer.measure(b)
    record(b)


def show(b, write):
    """The table on stdout; BENCHMARKS.md unless --no-write."""
    sys.stdout.write(table.printed(b))
    sys.stdout.flush()
    if write:
        report.write(b)


def main(argv):
    args = arguments(argv)
    b = Bench(args)
    b.keep_cluster = args.keep_cluster
    if args.report:
        run_dir = Path(args.report)
        if not run_dir.is_dir():
            die(f"no directory {args.report}")
        if not (run_dir / "results.json").is_file():
            die(f"{args.report} holds no results.json (not a finished run, or one from before the driver "
                "was Python: those recorded results.bash, which is not read)")
        b.run_dir = run_dir.resolve()
        load(b, b.run_dir)
        show(b, args.write)
        return
    b.run_dir = REPO / "target/bench" / time.strftime("run-%Y%m%dT%H%M%S")
    b.run_dir.mkdir(parents=True, exist_ok=True)
    for sig, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        signal.signal(sig, lambda *_, code=code: sys.exit(code))
    rc = 1
    try:
        os.chdir(REPO)
        measure(b)
        show(b, args.write)
        log(f"done in {b.R['wall']} s (logs and raw results in {b.run_dir})")
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
        raise
    finally:
        cleanup(b, rc)


if __name__ == "__main__":
    main(sys.argv[1:])
