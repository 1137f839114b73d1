"""scripts/soak's results: the verdict and its table (markdown), the samples (CSV) and the plot
(SVG, drawn here: standard library only), and docs/soak.md and docs/soak.svg for --write."""

import shutil
import statistics

FIELDS = ["t", "cycle", "rss_kib", "fds", "tasks", "b_rss_kib", "leader", "keep_status_bytes", "events",
          "event_bytes"]
# What is judged while churning: the lowest value of the last quarter against the highest of
# the second. keep's status may grow by the digits of its counters (its generation, which
# every cycle raises twice, and a device's request count): 16 bytes.
JUDGED = [("rss_kib", "replica a's VmRSS", 1024, "KiB"), ("keep_status_bytes", "keep's status", 16, "bytes")]
# ... and at rest (after warm-up, at the end; see soak.py's rest): descriptors and tasks, which
# while churning also count the connections and threads a burst left idle for a while.
AT_REST = [("fds", "replica a's open descriptors, at rest", 0, ""), ("tasks", "replica a's tasks, at rest", 0, ""),
           ("rss_kib", "replica a's VmRSS, at rest", 1024, "KiB")]


def windows(samples, seconds):
    second = [s for s in samples if seconds * 0.25 <= s["t"] < seconds * 0.5]
    last = [s for s in samples if s["t"] >= seconds * 0.75]
    return second, last


def report(samples, rested, facts, seconds):
    second, last = windows(samples, seconds)
    lines = ["| figure | after warm-up | at the end | growth | allowed | result |",
             "| --- | ---: | ---: | ---: | ---: | --- |"]
    ok = bool(second) and bool(last)
    for key, what, allowed, unit in AT_REST:
        before, after = rested["after warm-up"][key], rested["at the end"][key]
        good = after - before <= allowed
        ok &= good
        lines.append(f"| {what} | {before} {unit} | {after} {unit} | {after - before} {unit} | {allowed} {unit} | "
                     f"{'met' if good else 'MISSED'} |")
    for key, what, allowed, unit in JUDGED:
        if not (second and last):
            break
        hi, lo = max(s[key] for s in second), min(s[key] for s in last)
        good = lo - hi <= allowed
        ok &= good
        lines.append(f"| {what}, churning (second quarter's highest, last's lowest) | {hi} {unit} | {lo} {unit} | "
                     f"{lo - hi} {unit} | {allowed} {unit} | {'met' if good else 'MISSED'} |")
    if not (second and last):
        lines.append("| (too few samples for the two windows) | | | | | MISSED |")
    med = lambda w, k: statistics.median_low(s[k] for s in w) if w else 0  # noqa: E731
    trend = (f"Medians, second quarter → last: VmRSS {med(second, 'rss_kib') / 1024:.2f} → "
             f"{med(last, 'rss_kib') / 1024:.2f} MiB, descriptors {med(second, 'fds')} → {med(last, 'fds')}, "
             f"tasks {med(second, 'tasks')} → {med(last, 'tasks')}, Events in the namespace "
             f"{med(second, 'events')} → {med(last, 'events')} (the API server keeps Events an hour).")
    trend += (f" At rest, what replica a holds open: after warm-up {rested['after warm-up']['kinds']}, "
              f"at the end {rested['at the end']['kinds']}.")
    leaders = sum(1 for a, b in zip(samples, samples[1:]) if a["leader"] != b["leader"])
    head = [f"**{seconds} s**, {facts['cycles']} cycles, {facts['API calls']} API calls; "
            f"{facts['apiserver restarts']} API-server restarts, {leaders} changes of the Lease holder seen "
            f"between samples (b restarted while leading {facts['b restarted while leading']} times, "
            f"a made to step down {facts['a stepped down']} times; b started {facts['b started']} times).", ""]
    rows = ["| minute | cycle | a VmRSS | a fds | a tasks | b VmRSS | leader | keep's status | Events |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |"]
    step = max(1, len(samples) // 12)
    for s in samples[::step] + ([samples[-1]] if (len(samples) - 1) % step else []):
        rows.append(f"| {s['t'] / 60:.1f} | {s['cycle']} | {s['rss_kib'] / 1024:.2f} MiB | {s['fds']} | {s['tasks']} | "
                    f"{s['b_rss_kib'] / 1024:.2f} MiB | {s['leader']} | {s['keep_status_bytes']} B | "
                    f"{s['events']} ({s['event_bytes'] / 1024:.0f} KiB) |")
    text = "\n".join(head + lines + ["", trend, ""] + rows) + "\n"
    return text, ok


def csv(samples, path):
    with open(path, "w") as f:
        f.write(",".join(FIELDS) + "\n")
        for s in samples:
            f.write(",".join(str(s[k]) for k in FIELDS) + "\n")


def svg(samples, path):
    """Three panels over time: replica a's VmRSS (MiB), descriptors and tasks; the warm-up
    (first quarter) shaded."""
    width, panel, left, top = 760, 150, 70, 20
    panels = [("rss_kib", "a VmRSS (MiB)", 1 / 1024), ("fds", "a open descriptors", 1), ("tasks", "a tasks", 1)]
    end = max((s["t"] for s in samples), default=1) or 1
    height = top + len(panels) * (panel + 40)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="11">', f'<rect width="{width}" height="{height}" fill="white"/>']
    plot_w = width - left - 20
    for i, (key, title, scale) in enumerate(panels):
        y0 = top + i * (panel + 40)
        values = [s[key] * scale for s in samples] or [0]
        lo, hi = min(values), max(values)
        if hi - lo < 1e-9:
            lo, hi = lo - 1, hi + 1
        pad = (hi - lo) * 0.1
        lo, hi = lo - pad, hi + pad
        x = lambda t: left + plot_w * t / end  # noqa: E731
        y = lambda v: y0 + panel - panel * (v - lo) / (hi - lo)  # noqa: E731
        out.append(f'<rect x="{left}" y="{y0}" width="{plot_w * 0.25:.1f}" height="{panel}" fill="#eee"/>')
        out.append(f'<rect x="{left}" y="{y0}" width="{plot_w}" height="{panel}" fill="none" stroke="#888"/>')
        out.append(f'<text x="{left}" y="{y0 - 5}" font-weight="bold">{title}</text>')
        for v in (lo + pad, hi - pad):
            out.append(f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.1f}</text>')
        points = " ".join(f"{x(s['t']):.1f},{y(s[key] * scale):.1f}" for s in samples)
        out.append(f'<polyline points="{points}" fill="none" stroke="#1f5fa8" stroke-width="1.2"/>')
        out.append(f'<text x="{left + plot_w}" y="{y0 + panel + 14}" text-anchor="end">{end / 60:.0f} min</text>')
        out.append(f'<text x="{left}" y="{y0 + panel + 14}">0 (warm-up shaded)</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def write_docs(out, repo):
    """docs/soak.md (the summary of this run, with its command) and docs/soak.svg."""
    import subprocess
    import time
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    shutil.copy(out / "soak.svg", repo / "docs/soak.svg")
    text = ["# A long soak", "",
            "Written by `scripts/soak --write` (its header says what a cycle does and what is judged); the",
            "short form runs in `scripts/test` (`MUTANTOPS_SOAK_SECONDS=90`). This run: "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit `{commit}`, the binary of "
            "`MUTANTOPS_SOAK_BINARY` (default: the release build), "
            "on the local control plane of `scripts/cluster`, 2 cores.", "",
            (out / "summary.md").read_text(), "![replica a over the run](soak.svg)", ""]
    (repo / "docs/soak.md").write_text("\n".join(text))
