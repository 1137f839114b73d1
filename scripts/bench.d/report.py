"""BENCHMARKS.md: the run's header (date, commit, machine), the table, the section that
scripts/real-node --bench wrote there (kept as it is), how each figure is measured, the
profiles when they were taken, and scripts/bench.d/analysis.md (written by hand) at the end.
The wake figures that `scripts/real-node --wake-bench` wrote (the table's "real node:" rows
and subsection "Wake to ready on the real node") are kept as they are too."""

import json
import os
import platform
import subprocess

import api
import capacity
import curve
import peer
import table
from common import REPO, log, num


def machine():
    cpu = ""
    try:
        for line in subprocess.run(["lscpu"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.splitlines():
            if line.startswith("Model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal"):
                mem = int(line.split()[1])
    return f"{cpu or 'unknown CPU'}, {os.cpu_count()} cores, {mem / 1048576:.1f} GiB RAM, Linux {platform.release()}"


def node_section(path):
    """The image and real-node section: scripts/real-node --bench's own, with its own date and
    commit, kept as it is."""
    if not path.is_file():
        return ""
    lines, inside = [], False
    for line in path.read_text().splitlines():
        inside = inside or line == "<!-- real-node -->"
        if inside:
            lines.append(line)
        if inside and line == "<!-- /real-node -->":
            inside = False
    return "\n".join(lines)


WAKE_HEADING = "### Wake to ready on the real node"
SCREENS_HEADING = "### Screens on the real node"


def kept_rows(path):
    """The table's rows that scripts/real-node --wake-bench wrote, kept as they are."""
    if not path.is_file():
        return ""
    return "".join("\n" + line for line in path.read_text().splitlines() if line.startswith("| real node: "))


def kept_section(path, heading):
    """A subsection that scripts/real-node --wake-bench wrote ("Wake to ready on the real node",
    "Screens on the real node"), kept as it is, up to the next heading."""
    if not path.is_file():
        return ""
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if inside and (line.startswith("### ") or line.startswith("## ")):
            break
        inside = inside or line == heading
        if inside:
            lines.append(line)
    return "\n".join(lines).rstrip("\n") + "\n\n" if lines else ""


def header(b):
    R = b.R
    dirty = "" if R["dirty"] == "0" else f" (with uncommitted changes to {R['dirty']} tracked files)"
    node = node_section(REPO / "BENCHMARKS.md")
    node = node + "\n" if node else ""
    return f"""# Benchmarks

Written by `scripts/bench`; do not edit by hand (the analysis at the end comes from
`scripts/bench.d/analysis.md`). Rerun with `scripts/bench` on a quiet machine.

- **Date**: {R['date']}
- **Commit**: `{R['commit']}`{dirty}
- **Machine**: {R['machine']}
- **Rust**: {R['rustc']}; release profile `opt-level = "{R['opt_level']}"` (see Cargo.toml)
- **Control plane**: local, `scripts/cluster` (kube-apiserver {R['k8s']}, etcd, kwok fake node), state in `.cluster-bench`
- **Scale run**: {b.N} Mutations × {b.V} variants, `instances: 0` (no pods), applied by {b.PARALLEL} parallel `kubectl create`
- **Run time**: {R['wall']} s for the whole script, of which {R['build_s']} s building

{table.markdown(b)}{kept_rows(REPO / "BENCHMARKS.md")}

Noise: the machine's cores are shared with other work while this runs; the control plane
(etcd, kube-apiserver, controller manager, scheduler, kwok) runs on the same cores as the
operator, so convergence and write latencies include its CPU time.

{node}
"""


def measured(b):
    R = b.R

    def get(key, default):
        return R.get(key) or default

    try:
        bloat = b.path("bloat.txt").read_text().rstrip("\n")
    except OSError:
        bloat = "(skipped: --no-size)"
    points = ", ".join(str(n) for n in [*curve.points(b), b.N])
    static = ""
    if R.get("idle_static_rss"):
        static = f" The static binary: {R['idle_static_anon']} KiB anonymous, {R['idle_static_file']} KiB file pages."
    return f"""## How each figure is measured

### Binary size

`cargo build --release --locked`, then `strip -o` of a copy of `target/release/mutantops`
(the profile already strips; the copy makes sure). The static binary comes from
`scripts/static-build` (glibc, `-C target-feature=+crt-static`, checked static) and is stripped
the same way. The three static musl binaries are built here by `scripts/musl-build`
({get('musl_route', 'not built')}: {get('musl_rustc', '')}; zig links them against musl 1.2.5); their
size is as built (the release profile strips, and the host's `strip` cannot read ARM).
What takes the space, by crate (`.text` only, from `CARGO_PROFILE_RELEASE_STRIP=false
CARGO_TARGET_DIR=target/bloat cargo bloat --release --locked --crates -n 15`):

```
{bloat}
```

### Idle RSS

The release binary is started against the empty cluster (`RUST_LOG=info`, all namespaces,
leader election on, API token set), and 5 s after `/readyz` answers 200 (caches synced, the
Lease taken) `VmRSS` and `VmHWM` are read from `/proc/<pid>/status`. Of VmRSS,
{R['idle_anon']} KiB are anonymous memory (heap, stacks) and {R['idle_file']} KiB file pages (the
binary's code and libc, shared and reclaimable).{static}

### RSS at scale

`scripts/bench.d/converge.py` writes {b.N} Mutations (`m0000`...) of one small base Deployment
with {b.V} variants each (`v0`...: one env var, `instances: 0`, so kwok runs no pods and the
control plane copes). The operator runs from an empty namespace; the objects are created (see
convergence). **After convergence** is VmRSS at the end of the steady-state window;
**while converging** is the VmHWM of that process at the moment of convergence; **a restart** stops
the operator and starts a new one while all objects exist, so it lists {b.N} Mutations, {b.N * b.V}
Deployments and {b.N} Secrets, becomes leader and reconciles every Mutation; its VmHWM is read
once {b.N} reconciles have finished and the count stayed still for 3 s, with its VmRSS then
(**settled**). The restart is done {getattr(b, 'RESTARTS', 1)} times in a row
(`MUTANTOPS_BENCH_RESTARTS`), each a new process; the table judges the worst and lists each.
The first restart was ready (`/readyz`) {R['relist_ready_s']} s after its start.

### Convergence

`kubectl create -f` of {b.PARALLEL} JSON Lists in parallel (the clock starts before the first).
`converge.py` lists and watches the namespace's Mutations and the Deployments labelled
`mutantops.neiam.org/kind=mutation` and records when all {b.N * b.V} Deployments are
`<mutation>-v<j>`, controlled by their Mutation, with `replicas: 0` and both env vars, and
when every Mutation has `status.observedGeneration` = generation, a Secret, {b.V} variants
`Ready` and condition `Ready=True`. A variant with 0 instances is Ready only once the
Deployment controller (kube-controller-manager) has observed its Deployment, so the watcher
also records when that was so for all of them: the time from then to the last Mutation
reporting Ready is the operator's own lag; before it, the control plane's speed on this machine
dominates. The bulk create itself took {R['apply_s']} s; {R['secrets']} Secrets existed afterwards.
The operator's requests are counted in the API server's audit log (`MUTANTOPS_AUDIT_LOG`,
Metadata level) by user agent `mutantops/`, between a mark taken before the first create and
one at convergence, leaving out watches and the Lease (`coordination.k8s.io`):
{R['conv_by_res']}.

### Steady state

After convergence, nothing changes for {b.STEADY_SECONDS} s; the operator's requests in that
window, from the audit log as above, are scaled to one minute. Lease requests (the leader
renews every third of the 15 s duration with an UPDATE, without a GET before it) are reported
apart, and so are watch re-opens ({R['steady_watches']} in the window). Requests in the window: {get('steady_detail', 'none')}.
A restart (see RSS) made these requests: {get('relist_detail', 'none')}.

### HTTP API

The operator runs pinned to CPU 0 (`taskset -c 0`; tokio then starts one worker), the load
generators on CPU 1, and for this part every thread of the control plane (etcd,
kube-apiserver, the controller manager, the scheduler, kwok) is pinned to CPU 1 too
(`taskset -a -pc 1`), so nothing else runs on the operator's core. A Mutation `w` with variant `a` is created through the API (admin token);
its own token is read from Secret `w-secret`.

- **GET**: `taskset -c 1 wrk -t1 -c50 -d{b.WRK_SECONDS}s --latency -H "Authorization: Bearer <token>"
  http://127.0.0.1:<port>/api/v1/namespaces/<ns>/mutations/w/variants/a`, after a 3 s warm-up
  run; socket errors: {R['wrk_errors']}.
- **GET over HTTPS**: the same wrk run against `https://` after restarting the operator with
  `MUTANT_API_TLS_CERT_FILE`/`MUTANT_API_TLS_KEY_FILE` (a self-signed P-256 certificate
  made by openssl for the run; wrk does not verify it); socket errors: {get('tls_wrk_errors', 'none')}.
- **Screens** (`screens.py`): Mutation `s` with `spec.screen` and 100 variants (instances 0),
  and for each a screen Secret of 48,062 bytes (a 1-bit 800x480 BMP) written by the bench as
  the leader writes one (no renderer runs on the fake node); the operator's VmRSS before them
  and 10 s after every screen is served ({get('screen_rss_before', '-')} and {get('screen_rss', '-')} KiB); then the
  same wrk run against `.../mutations/s/variants/v0/screen` with `s`'s token, and again with
  `If-None-Match` naming its ETag (every answer a 304 with no body).
- **POST / PATCH**: `latency.py`, a sequential client (one request at a time over one
  keep-alive connection, timed around request and response): {b.WRITES} POSTs of new variants
  `p0000`... (instances 0), then {b.WRITES} PATCHes of those to `instances: 1` (kwok runs the
  pods). Each answers once the operator's cache shows the write: it is a GET and a PATCH of the
  Mutation on the API server plus the watch event coming back.
- **API server's own latency** for the same period: `kubectl get --raw /metrics` before and
  after, the difference of the `apiserver_request_duration_seconds` buckets for
  `group="neiam.org", resource="mutations"`, verb PATCH and GET (no subresource), and p50/p99
  interpolated inside the bucket as `histogram_quantile` does; the buckets are coarse (5, 25,
  50, 100 ms...), so these are estimates.

### Start-up

`startup.py` spawns `target/release/mutantops`, polls `/readyz` every 5 ms until it answers
200 (connected, both listeners up, every cache listed), then stops it with SIGTERM; {b.STARTS}
runs on the empty cluster ({R['startup_runs']} ms), median.

### The musl binary beside the glibc one

The binary users run on their boards is the static musl one (`scripts/musl-build`). Its
x86_64 build runs three of the measurements above right after the glibc binary, in the same
run and the same way: idle RSS (5 s after `/readyz`); the GET load (pinned to CPU 0, on the
same Mutation, warm-up and wrk as above, the glibc operator stopped first); and the restart at
scale (after the glibc restarts, as many times: the same {b.N} Mutations, {b.N * b.V} Deployments and {b.N} Secrets
listed, {b.N} reconciles finished and the count still for 3 s, then VmRSS and VmHWM). Because
req/s on a shared 2-core machine varies by a quarter from one minute to the next, the CPU cost
of a GET is also counted exactly: each binary runs under `valgrind --tool=callgrind
--instr-atstart=no`, answers 200 warm-up GETs (`latency.py`, one keep-alive
connection), then instrumentation is switched on (`callgrind_control -i on`); a new
connection sends one GET (dumped), another sends {api.GET_COUNT + 1} (dumped), and the difference
of the two dumps is divided by {api.GET_COUNT}: the user-space instructions one GET costs on a
kept-alive connection, without the connection's own set-up, the same from run to run. The
glibc binary is counted over HTTPS the same way (`latency.py` checks the certificate; the
difference leaves out the handshake), and for a device's poll: a Mutation `p` with
`spec.devices.sleep` (its defaults), one device enrolled into its variant by the admin, its
polls (`GET .../devices/bench/poll` with the device's token, each a heartbeat) counted as the
GETs are. The ARM
binaries are measured by size only here: under qemu-user their memory and speed are qemu's.
`scripts/edge` runs all three against the control plane (the ARM ones under qemu).

{capacity.text(b)}
### Scale curve

The same convergence at {' '.join(map(str, b.CURVE))} Mutations × {b.V} variants, each before the scale run, in a
namespace of its own that is deleted afterwards: a fresh operator, the Mutations created by
`kubectl create`, `converge.py` as above, the operator's requests from the audit log,
and VmRSS and VmHWM 10 s after every Mutation was Ready (the {b.N}-Mutation point is the scale
run, read after its {b.STEADY_SECONDS} s steady window). Convergence time at small scale is
mostly the control plane's: the Deployment controller must observe each Deployment. The peer
runs at the same points (below).

### The peer: Argo Rollouts

What a user would run instead is [Argo Rollouts](https://github.com/argoproj/argo-rollouts)
{peer.VERSION}: its `Experiment` runs several ReplicaSets from pod templates side by side,
indefinitely when it has no `duration`, which is what a Mutation's variants are. Its
controller (`rollouts-controller`, built here from the Go module proxy with {peer.GO},
`-trimpath -ldflags='-s -w'`; the CRDs from its module's `manifests/crds`) runs on the same
cluster, with its defaults (all namespaces, leader election on), after the scale run's
namespace is deleted, at every point of the scale curve ({points} × {b.V}), each time a fresh
controller and a namespace of its own, deleted afterwards. The same workload: n Experiments
(`e0000`...) of {b.V} templates (`v0`...) with the bench's pod template and env vars and
`replicas: 0`, created by up to {b.PARALLEL} parallel `kubectl create`. `converge.py` records
when all n × {b.V} ReplicaSets exist (controlled by an Experiment, `replicas: 0`, observed by the
ReplicaSet controller) and when every Experiment is `Running` with all templates `Running`.
Idle RSS is read 5 s after the first controller logs that its Experiment workers started;
VmRSS and VmHWM 10 s after convergence, and at {b.N} × {b.V} after the same {b.STEADY_SECONDS} s
steady window; requests by user agent `rollouts-controller/` as for the operator (not watches,
not leases), at {b.N} × {b.V}: {get('peer_by_res', 'not measured')}. mutantops' RSS is held to a tenth
of the peer's at every point; where it is not, its row splits mutantops' VmRSS into file pages
(the binary's code and libc, which dominate at small scales) and anonymous memory, beside
the idle figures.

How the workloads differ, and why the comparison is still fair: a Mutation's variant is a
Deployment (the Deployment controller then makes its ReplicaSet), an Experiment's template is a
ReplicaSet made by the peer itself, so the peer does one level less and its "ready" waits on
the ReplicaSet controller only, where ours waits on the Deployment controller (which is slower
here: it also writes a ReplicaSet and two statuses). Both controllers keep their own objects
in watch caches and report a status per owner; both cost their user the same thing, memory and
API requests on the board, for the same running workload. The peer also watches what it needs
for Rollouts (Services, Ingresses, Pods, ReplicaSets of the whole cluster, AnalysisRuns...),
which is part of what running it costs.

"""


def profiles_text(b):
    """The memory and CPU profiles, when this run took them."""
    R, out = b.R, ""
    if R.get("profile") == "measured":
        h = json.loads(b.path("heap.json").read_text())
        groups = "\n".join(f"| {g['name']} | {num(g['peak_mib'])} MiB ({num(g['peak_share'])}%) | "
                           f"{num(g['live_mib'])} MiB ({num(g['live_share'])}%) |" for g in h["groups"])
        out += f"""## Memory profile of a restart at scale

The restart above, run once more under `heaptrack` with an unstripped build of the same source
and profile with the system's malloc (`--features system-allocator`, `target/heap`: heaptrack
sees malloc, not the dlmalloc heap of the release binary), then `heaptrack_print --print-flamegraph --flamegraph-cost-type peak`:
the heap at its peak, and (`--flamegraph-cost-type leaked`, the process being killed with
SIGKILL once the reconciles were done) what was still live then, grouped by `profiles.py`
by the outermost code that allocated it. heaptrack slows the process and counts only the
heap (not what malloc keeps after a free): the shares, not the absolute numbers, are the point.

Peak heap {num(h['peak_mib'])} MiB; live after the restart settled {num(h['live_mib'])} MiB.

| allocated by | at the peak | live after |
| --- | --- | --- |
{groups}

"""
    for key, name, load, what in (("cpu_profile", "perf", "wrk-perf", "the API's GET path"),
                                   ("tls_cpu_profile", "perf-tls", "wrk-tls-perf", "the API's GET path over HTTPS")):
        if R.get(key) != "measured":
            continue
        p = json.loads(b.path(f"{name}.json").read_text())
        rps = int(api.parse_wrk(b.path(f"{load}.txt"))["rps"])
        crates = "\n".join(f"| {c['name']} | {num(c['share'])}% |" for c in p["crates"])
        top = "\n".join(f"| {num(t['share'])}% | `{t['symbol'].replace('|', '/')}` |" for t in p["top"])
        out += f"""## CPU profile of {what}

A target of this run was missed, so its wrk run above was repeated against the unstripped
build (pinned the same way) under `perf record -F 999 -g -p <pid> -- sleep {b.WRK_SECONDS}`, then
`perf report --no-children --sort dso,sym`, summed by crate by `profiles.py`
({rps} req/s under perf):

| where | share of the CPU samples |
| --- | --- |
{crates}

Top symbols:

| share | symbol |
| --- | --- |
{top}

"""
    return out


def write(b):
    out = REPO / "BENCHMARKS.md"
    text = header(b) + measured(b) + kept_section(out, WAKE_HEADING) + kept_section(out, SCREENS_HEADING) + profiles_text(b)
    analysis = REPO / "scripts/bench.d/analysis.md"
    if analysis.is_file():
        text += analysis.read_text()
    out.write_text(text)
    log(f"wrote {out}")
