"""The static musl binaries (scripts/musl-build): their sizes, and the rows that put the x86_64
one beside the glibc build of the same run. The x86_64 binary runs the idle, API GET and
restart measurements right after the glibc one (idle.py, api.py, scale.py); under qemu-user
the ARM binaries' memory and speed would be qemu's, so they are measured by size only."""

import subprocess
import sys

import idle
from common import REPO, bytes_mib, die, ge, le, log, met, output, ratio, restarts, row, step

TARGETS = ["x86_64-unknown-linux-musl", "aarch64-unknown-linux-musl", "armv7-unknown-linux-musleabihf"]
SIZE_TARGET = 6 * 1024 * 1024
# The two the boards run, tighter than the dynamic build's (R50): the x86_64 and the aarch64.
SIZE_TARGETS = {"x86_64": 48 * 1024 * 1024 // 10, "aarch64": 4 * 1024 * 1024}
# The musl x86_64 binary is held to the glibc one's targets (memory at scale: common.py).
P99_TARGET_MS = 2


def build(b):
    R = b.R
    step(f"static musl builds (scripts/musl-build: {' '.join(TARGETS)})")
    logfile = b.path("musl-build.log")
    with open(logfile, "w") as out:
        p = subprocess.Popen([str(REPO / "scripts/musl-build"), *TARGETS], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
        for line in p.stdout:
            out.write(line)
            sys.stderr.write(line)
    if p.wait():
        die(f"scripts/musl-build failed: see {logfile}")
    for t in TARGETS:
        # The release profile strips; the ARM binaries cannot go through the host's strip.
        R[f"size_musl_{t.split('-')[0]}"] = str((REPO / f"target/musl/{t}/mutantops").stat().st_size)
    R["musl"] = "measured"
    routes = [line.split()[4] for line in logfile.read_text().splitlines()
              if len(line.split()) == 5 and line.split()[0] == "x86_64-unknown-linux-musl"]
    R["musl_route"] = routes[-1] if routes else ""
    rustc = "/usr/bin/rustc" if R["musl_route"] == "build-std" else "rustc"
    R["musl_rustc"] = output([rustc, "--version"], check=False).strip() or "unknown"
    log(f"musl: x86_64 {R['size_musl_x86_64']}, aarch64 {R['size_musl_aarch64']}, armv7 {R['size_musl_armv7']} bytes")


def rows(b):
    """Their sizes, and the x86_64 one beside the glibc build in the same run. musl is allowed
    15% less GET throughput than glibc; its memory at scale has the glibc build's targets."""
    R, N, V = b.R, b.N, b.V
    if R.get("musl", "skipped") != "measured":
        yield row("binaries, static musl (scripts/musl-build)", "skipped (--no-musl)", "-", "-")
        return
    for t in TARGETS:
        arch = t.split('-')[0]
        size, target = R[f"size_musl_{arch}"], SIZE_TARGETS.get(arch, SIZE_TARGET)
        yield row(f"binary, static musl {t}", f"{bytes_mib(size)} ({size} B)", f"≤ {bytes_mib(target)}",
                  met(le(size, target)))
    if not R.get("idle_musl_rss"):
        return
    yield idle.judged(R, "musl x86_64: idle RSS (VmRSS / VmHWM)", "idle_musl_")
    if R.get("musl_relist_rss"):
        yield from restarts(R, "musl x86_64: ", "musl_relist")
        yield row(f"musl x86_64: the same at {N}x{V} against glibc in the same run (settled / peak)",
                  f"{ratio(R['musl_relist_rss'], R['relist_rss'])} / {ratio(R['musl_relist_hwm'], R['relist_hwm'])}",
                  "-", "-")
    if R.get("musl_rps"):
        yield row("musl x86_64: API GET req/s, 1 core (glibc in the same run)",
                  f"{R['musl_rps']} (glibc {R['rps']}, {ratio(R['musl_rps'], R['rps'])})", "≥ 85% of glibc",
                  met(ge(R["musl_rps"], 0.85 * float(R["rps"]))))
        yield row("musl x86_64: API GET p50 / p99 (glibc in the same run)",
                  f"{R['musl_p50']} ms / {R['musl_p99']} ms (glibc {R['p50']} / {R['p99']} ms)", "p99 ≤ 2 ms",
                  met(le(R["musl_p99"], P99_TARGET_MS)))
    if R.get("musl_instr"):
        # 15% fewer requests per CPU second is 1/0.85 = 118% of the instructions.
        yield row("musl x86_64: instructions per API GET (callgrind; glibc in the same run)",
                  f"{R['musl_instr']} (glibc {R['instr']}, {ratio(R['musl_instr'], R['instr'])})", "≤ 118% of glibc",
                  met(le(R["musl_instr"], float(R["instr"]) / 0.85)))
