"""The steady state: after convergence nothing changes for STEADY_SECONDS; the requests a
controller makes in that window (audit log), scaled to one minute. For the operator the Lease
(leader election) and watch re-opens are counted apart, and VmRSS is read at the end: the RSS
at scale after convergence."""

import time

from common import joined, log, per_minute, step


def window(b, agent, record):
    """The requests of user agent `agent` in a window of STEADY_SECONDS from now."""
    start = b.audit_mark()
    time.sleep(b.STEADY_SECONDS)
    return b.requests(start, b.audit_mark(), record, agent)


def measure(b):
    R, s = b.R, b.STEADY_SECONDS
    step(f"steady state: {s}s with nothing changing")
    req = window(b, "mutantops/", b.path("requests-steady.json"))
    R["steady_writes"] = per_minute(sum(n for v, n in req["by_verb"].items() if v not in ("get", "list")), s)
    R["steady_reads"] = per_minute(sum(n for v, n in req["by_verb"].items() if v in ("get", "list")), s)
    R["steady_lease"] = per_minute(sum(req["lease"].values()), s)
    R["steady_lease_verbs"] = joined(req["lease"])
    R["steady_watches"] = str(req["watches_opened"])
    R["steady_detail"] = joined(req["by_resource"])
    st = b.operator_status("rss-steady.json")
    R["scale_rss"], R["scale_anon"], R["scale_file"] = str(st["VmRSS"]), str(st["RssAnon"]), str(st["RssFile"])
    log(f"steady: {R['steady_writes']} writes/min, {R['steady_reads']} reads/min, lease {R['steady_lease']}/min; "
        f"VmRSS {R['scale_rss']} KiB")
