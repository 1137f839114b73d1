"""Idle RSS: each binary started against the empty cluster (all namespaces, leader election on,
API token set) and, 5 s after /readyz answers 200 (caches synced, the Lease taken), its VmRSS
and VmHWM, and of VmRSS the anonymous memory and the file pages (the binary's code and libc)."""

import time

from common import BIN, MUSL_BIN, STATIC_BIN, kib_mib, le, log, memory, met, row, step

TARGET_KIB = 8 * 1024  # R50, for every build


def idle(b, name, prefix, binary=BIN):
    """Results R[<prefix>rss], ...hwm, ...anon, ...file (KiB) of one binary."""
    b.start_operator(name, binary=binary)
    time.sleep(5)
    st = b.operator_status(f"{name}.json")
    b.stop_operator()
    memory(b.R, prefix, st)
    return st


def measure(b):
    R = b.R
    step("idle RSS on an empty cluster (5 s after /readyz)")
    idle(b, "idle", "idle_")
    log(f"idle: VmRSS {R['idle_rss']} KiB, VmHWM {R['idle_hwm']} KiB (anon {R['idle_anon']}, file {R['idle_file']})")
    if STATIC_BIN.is_file() and R["size_static"] != "skipped":
        idle(b, "idle-static", "idle_static_", STATIC_BIN)
        log(f"idle (static): VmRSS {R['idle_static_rss']} KiB")
    if R["musl"] == "measured":
        idle(b, "idle-musl", "idle_musl_", MUSL_BIN)
        log(f"idle (musl): VmRSS {R['idle_musl_rss']} KiB")


def judged(R, label, prefix):
    """The row of one binary's idle RSS, judged by its VmHWM."""
    return row(label, f"{kib_mib(R[prefix + 'rss'])} / {kib_mib(R[prefix + 'hwm'])}", "≤ 8 MiB",
               met(le(R[prefix + "hwm"], TARGET_KIB)))
