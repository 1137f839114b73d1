"""What kine absorbed while the fleet ran, when the fleet's control plane runs on kine
(MUTANTOPS_DATASTORE=kine: scripts/cluster starts kine on SQLite in place of etcd, its metrics
on the peer port). Every write to kine is one SQL insert (kine keeps each revision as a row:
a create, an update and a delete are each an insert), so the inserts between two marks are
the writes it absorbed; the slow ones are read off kine_sql_time_seconds and its log (kine
logs every statement over 1 s). None on etcd."""

import re
import urllib.request
from pathlib import Path

WRITES = ("Insert", "InsertReturning")
SAMPLE = re.compile(r'^(kine_sql_total|kine_sql_time_seconds_bucket)\{([^}]*)\} ([0-9.e+]+)$')


def on_kine(cluster_dir):
    try:
        return (Path(cluster_dir) / "run/datastore").read_text().strip() == "kine"
    except OSError:
        return False


def port(cluster_dir):
    for line in (Path(cluster_dir) / "ports").read_text().splitlines():
        if line.startswith("ETCD_PEER_PORT="):
            return int(line.split("=", 1)[1])
    raise RuntimeError(f"no ETCD_PEER_PORT in {cluster_dir}/ports")


def scrape(cluster_dir):
    """kine's counters now: SQL statements by name and outcome, and the inserts' latency
    buckets (cumulative, by upper bound in seconds); the lines of its log so far."""
    if not on_kine(cluster_dir):
        return None
    with urllib.request.urlopen(f"http://127.0.0.1:{port(cluster_dir)}/metrics", timeout=10) as r:
        text = r.read().decode()
    total, buckets = {}, {}
    for line in text.splitlines():
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        if m.group(1) == "kine_sql_total":
            key = f"{labels.get('name')} {labels.get('error_code') or 'ok'}"
            total[key] = total.get(key, 0) + float(m.group(3))
        elif labels.get("name") in WRITES:
            le = labels.get("le")
            buckets[le] = buckets.get(le, 0) + float(m.group(3))
    log = Path(cluster_dir) / "logs/kine.log"
    lines = log.read_text(errors="replace").splitlines() if log.is_file() else []
    return {"total": total, "buckets": buckets, "log_lines": len(lines)}


def figures(cluster_dir, start, end, window_s):
    """The writes kine absorbed between two scrapes, per second, their p99 (a bucket's upper
    bound), the statements that failed, and the slow statements it logged."""
    if not start or not end:
        return None
    delta = {k: end["total"][k] - start["total"].get(k, 0) for k in end["total"]}
    inserts = sum(n for k, n in delta.items() if k.split(" ")[0] in WRITES and k.endswith(" ok"))
    failed = {k: n for k, n in delta.items() if not k.endswith(" ok") and n}
    counts = sorted(((float(le) if le != "+Inf" else float("inf")), end["buckets"][le] - start["buckets"].get(le, 0))
                    for le in end["buckets"])
    p99 = None
    if counts and counts[-1][1]:
        p99 = next(le for le, n in counts if n >= 0.99 * counts[-1][1])
    log = Path(cluster_dir) / "logs/kine.log"
    lines = log.read_text(errors="replace").splitlines()[start["log_lines"]:end["log_lines"]] if log.is_file() else []
    slow = [x for x in lines if "Slow SQL" in x or "slow sql" in x.lower()]
    return {"inserts": int(inserts), "inserts_per_s": inserts / (window_s or 1),
            "insert_p99_s": p99, "failed": failed, "slow_sql_logged": len(slow),
            "statements": int(sum(delta.values()))}


def text(k, unanswered=None):
    """One line of what kine absorbed (`figures`), and whether anything timed out: a failed
    statement, a statement kine logged as slow, and (when given) the boards' requests left
    without an answer. Empty without kine figures."""
    if not k:
        return ""
    p99 = "-" if k["insert_p99_s"] is None else f"{k['insert_p99_s'] * 1000:g} ms"
    waited = "" if unanswered is None else f"{unanswered} board requests without an answer, "
    return (f"kine/SQLite absorbed {k['inserts']} writes ({k['inserts_per_s']:.1f}/s, insert p99 <= {p99}); "
            f"{waited}{sum(k['failed'].values()):g} statements failed, "
            f"{k['slow_sql_logged']} logged as slow (> 1 s)")
