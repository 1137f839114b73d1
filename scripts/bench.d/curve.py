"""The scale curve's smaller points (MUTANTOPS_BENCH_CURVE, below N; N is its last point, the
scale run of scale.py), each in a namespace of its own, deleted afterwards: a fresh operator,
the Mutations created as in the scale run, and convergence, requests and RSS (10 s after)."""

import time

import converge
from common import die, kib_mib, log, memory, num, number, row, step, suffix


def points(b):
    """The curve's points below N that this run measures (the peer runs them too)."""
    return [n for n in b.CURVE if n < b.N] if b.DO_CURVE else []


def measure(b):
    R = b.R
    for n in points(b):
        ns = f"bench-curve-{n}-{suffix()}"
        step(f"scale curve: {n} Mutations x {b.V} variants in namespace {ns}")
        b.create_namespace(ns)
        b.start_operator(f"curve-{n}")
        time.sleep(2)
        res = converge.point(b, "mutations", ns, n, b.path(f"curve-{n}"), b.TIMEOUT)
        if not res["converged"]:
            die(f"the {n}-Mutation point did not converge")
        R[f"curve_{n}_deps"], R[f"curve_{n}_ready"] = num(res["deployments"]), num(res["ready"])
        R[f"curve_{n}_requests"] = str(res["requests"]["total"])
        time.sleep(10)
        st = b.operator_status(f"curve-{n}/rss.json")
        memory(R, f"curve_{n}_", st)
        log(f"curve {n}: Ready after {R[f'curve_{n}_ready']} s, {R[f'curve_{n}_requests']} requests, "
            f"VmRSS {R[f'curve_{n}_rss']} KiB")
        b.stop_operator()
        b.delete_namespace(ns, 180)


def rows(b):
    """One row a point: the smaller runs and the scale run itself."""
    R, V = b.R, b.V
    if not b.DO_CURVE:
        return
    for n in b.CURVE:
        if not R.get(f"curve_{n}_ready"):
            continue
        req = R[f"curve_{n}_requests"]
        yield row(f"scale curve, {n}x{V}: every Mutation Ready / requests (per variant) / VmRSS 10 s after (VmHWM)",
                  f"{R[f'curve_{n}_ready']} s / {req} ({number(req) / (n * V):.2f}) / "
                  f"{kib_mib(R[f'curve_{n}_rss'])} ({kib_mib(R[f'curve_{n}_hwm'])})", "-", "-")
    req = R["conv_requests"]
    yield row(f"scale curve, {b.N}x{V} (the scale run above): every Mutation Ready / requests (per variant) / "
              f"VmRSS {b.STEADY_SECONDS} s after (VmHWM)",
              f"{R['conv_ready']} s / {req} ({number(req) / (b.N * V):.2f}) / {kib_mib(R['scale_rss'])} "
              f"({kib_mib(R['conv_hwm'])})", "-", "-")
