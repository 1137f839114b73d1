"""Profiles, read into JSON for the report: heaptrack's heap at its peak and still live at the
end of a restart, grouped by the code that allocated it; and a `perf record` CPU profile,
summed by crate, with its top symbols."""

import re
import subprocess

from common import die

# Groups of the memory profile: the first group with an alternative whose substrings all occur
# in a stack's frames names the stack's allocation.
HEAP_GROUPS = [
    # Objects the watch streams decoded and the reflector stores keep (a copy each), by kind
    # where the stack names it: the compact types of mutantops::variant the watches turn them
    # into, before that module's other code (which builds Deployments in reconciles).
    ("watch cache: Deployments (variant::ObservedDeployment)",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("ObservedDeployment",)]
     # the operator's own store of generated objects (cache::index), and the decoder that
     # fills it: what it keeps is allocated there, not in kube-runtime's reflector
     + [("mutantops::variant::observed::decode",), ("mutantops::cache::index",)]),
    ("watch cache: Mutations (crd::Mutation)",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("crd::spec::Mutation",)]),
    ("watch cache: Secrets (variant::CachedSecret)",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("CachedSecret",)]),
    ("watch cache: Services (variant::ObservedService)",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("ObservedService",)]),
    ("reconciles in flight: Deployments built from the base (mutantops::variant)",
     [("mutantops::variant::",)]),
    ("Event recorder: published Events, kept 6 minutes (kube-runtime events)",
     [("kube_runtime::events::",)]),
    ("reconciles in flight: their API requests and responses (kube-client)",
     [("kube_client::api::",)]),
    ("watch caches: other (the stores' Arc boxes, list pages, maps: kind not in the stack)",
     [("kube_runtime::watcher",), ("EventDecode",), ("kube_runtime::reflector",), ("StreamBackoff",)]),
    ("reconciles in flight: their futures, boxed by the controller's runner (kube-runtime)",
     [("OnComplete", "box_new_uninit")]),
    ("controller machinery: queue, scheduler, store maps (kube-runtime, inlined: not told apart)",
     [("kube_runtime::controller",), ("kube_runtime::scheduler",), ("OnComplete",)]),
    ("other reconcile code (mutantops::controller)",
     [("mutantops::controller::reconcile",), ("mutantops::controller::secret",)]),
    ("requests in flight in kube-client's service stack (tower buffer, headers)",
     [("kube_client::client",), ("tower::buffer",), ("tower::util",)]),
    ("HTTP/1 connections to the API server (hyper buffers, pooled connections)",
     [("hyper::",), ("hyper_util::",)]),
    ("TLS (rustls)", [("rustls::",)]),
    ("tokio runtime", [("tokio::",)]),
]


def heap_group(frames):
    for name, alternatives in HEAP_GROUPS:
        if any(all(k in frames for k in alt) for alt in alternatives):
            return name
    return "other"


def heap_groups(path):
    totals, total = {}, 0
    with open(path) as f:
        for line in f:
            stack, _, cost = line.rstrip("\n").rpartition(" ")
            try:
                cost = int(cost)
            except ValueError:
                continue
            total += cost
            name = heap_group(stack.replace("..", "::"))
            totals[name] = totals.get(name, 0) + cost
    return totals, total


def heap(peak_path, live_path):
    """Two `heaptrack_print --print-flamegraph F --flamegraph-cost-type peak|leaked` outputs,
    grouped by HEAP_GROUPS."""
    peak, peak_total = heap_groups(peak_path)
    live, live_total = heap_groups(live_path)
    if peak_total <= 0:
        die(f"no allocations in {peak_path}")
    names = sorted(set(peak) | set(live), key=lambda g: -(peak.get(g, 0) + live.get(g, 0)))

    def mib(b):
        return round(b / 1048576, 1)

    return {
        "peak_mib": mib(peak_total),
        "live_mib": mib(live_total),
        "groups": [{"name": g, "peak_mib": mib(peak.get(g, 0)), "live_mib": mib(live.get(g, 0)),
                    "peak_share": round(100 * peak.get(g, 0) / peak_total),
                    "live_share": round(100 * live.get(g, 0) / live_total) if live_total else 0}
                   for g in names
                   if peak.get(g, 0) >= 0.005 * peak_total or live.get(g, 0) >= 0.005 * max(live_total, 1)],
    }


def crate_of(dso, kind, sym):
    if kind == "k":
        return "kernel (syscalls, TCP/IP, scheduling)"
    if "mutantops" not in dso:
        return dso
    sym = sym.lstrip("<&_ ")
    if sym.startswith("$LT$"):
        sym = sym[4:]
    head = sym.split("::", 1)[0]
    if head.startswith("$") or not head or "::" not in sym:
        return "mutantops binary, unattributed"
    return head


def perf(path):
    """`perf report` of a `perf record` file: the share of each crate (or the kernel, or a
    library) of the CPU samples and the top symbols."""
    out = subprocess.run(
        ["perf", "report", "-i", str(path), "--stdio", "--no-children", "--sort", "dso,sym", "-g", "none",
         "--percent-limit", "0"],
        capture_output=True, text=True, check=False)
    if out.returncode != 0:
        die(f"perf report failed: {out.stderr[-500:]}")
    line_re = re.compile(r"^\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*?)\s*$")
    rows = []
    for line in out.stdout.splitlines():
        m = line_re.match(line)
        if m:
            rows.append((float(m.group(1)), m.group(2), m.group(3), m.group(4)))
    if not rows:
        die(f"no samples in {path}")
    crates = {}
    for pct, dso, kind, sym in rows:
        c = crate_of(dso, kind, sym)
        crates[c] = crates.get(c, 0) + pct
    top = sorted(rows, reverse=True)[:15]
    return {
        "crates": [{"name": c, "share": round(p, 1)} for c, p in sorted(crates.items(), key=lambda kv: -kv[1])
                   if p >= 0.5],
        "top": [{"share": p, "dso": d, "symbol": re.sub(r"::h[0-9a-f]{16}$", "", sym)[:140]}
                for p, d, k, sym in top],
    }

