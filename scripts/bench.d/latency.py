"""Write latency: sequential POSTs of new variants, then PATCHes of them, each timed by a
client that sends one request at a time over one keep-alive connection; beside them the API
server's own latency for the same period (the apiserver_request_duration_seconds buckets of
Mutations, from two /metrics snapshots).

Run as a script, the sequential client alone (api.py runs it pinned with taskset):

  latency.py N METHOD URL TOKEN BODY [CAFILE]
                                       N requests, {i} in the URL and BODY replaced by the
                                       request's index (0000, 0001, ...); JSON with p50/p99/max;
                                       an https URL is checked against CAFILE
"""

import http.client
import json
import ssl
import statistics
import subprocess
import sys
import time
import urllib.parse

from common import die, log, num, write_json


def connect(u, cafile):
    if u.scheme == "https":
        return http.client.HTTPSConnection(u.hostname, u.port, timeout=30,
                                           context=ssl.create_default_context(cafile=cafile))
    return http.client.HTTPConnection(u.hostname, u.port, timeout=30)


def sequential(n, method, url, token, body_template, cafile=None):
    u = urllib.parse.urlsplit(url)
    c = connect(u, cafile)
    times = []
    for i in range(n):
        path = u.path.replace("{i}", f"{i:04d}")
        body = body_template.replace("{i}", f"{i:04d}").encode()
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        start = time.perf_counter()
        c.request(method, path, body=body, headers=headers)
        r = c.getresponse()
        data = r.read()
        elapsed = time.perf_counter() - start
        if r.status not in (200, 201):
            die(f"{method} {path}: {r.status} {data[:300]!r}")
        times.append(elapsed)
        if r.getheader("Connection", "").lower() == "close":
            c.close()
            c = connect(u, cafile)
    c.close()
    times.sort()

    def pct(q):
        return round(times[min(len(times) - 1, int(q * len(times)))] * 1000, 2)

    return {"n": n, "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(times[-1] * 1000, 2),
            "mean_ms": round(statistics.mean(times) * 1000, 2)}


def client(n, method, url, token, body, pin=None, cafile=None):
    """sequential() in a process of its own (pinned to CPU `pin` with taskset)."""
    cmd = ["taskset", "-c", pin] if pin else []
    p = subprocess.run([*cmd, sys.executable, __file__, str(n), method, url, token, body,
                        *([str(cafile)] if cafile else [])],
                       stdout=subprocess.PIPE, text=True, check=False)
    if p.returncode:
        die(f"the sequential client failed ({method} {url})")
    return json.loads(p.stdout)


# --- the API server's histogram -------------------------------------------------------------------


def buckets(path, group, resource, verbs):
    """{verb: {le: count}} of apiserver_request_duration_seconds for the main resource."""
    out = {v: {} for v in verbs}
    with open(path) as f:
        for line in f:
            if not line.startswith("apiserver_request_duration_seconds_bucket{"):
                continue
            labels_text, value = line.rsplit(" ", 1)
            labels = dict(
                kv.split("=", 1) for kv in labels_text[labels_text.index("{") + 1: labels_text.rindex("}")].split(",")
            )
            labels = {k: v.strip('"') for k, v in labels.items()}
            if labels.get("group") != group or labels.get("resource") != resource:
                continue
            if labels.get("subresource", "") != "" or labels.get("verb") not in out:
                continue
            le = float(labels["le"])
            b = out[labels["verb"]]
            b[le] = b.get(le, 0) + float(value)
    return out


def quantile(q, diff):
    """Prometheus' histogram_quantile: linear inside the bucket."""
    les = sorted(diff)
    total = diff[les[-1]] if les else 0
    if total <= 0:
        return None
    rank = q * total
    prev_le, prev_c = 0.0, 0.0
    for le in les:
        c = diff[le]
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / max(c - prev_c, 1e-12)
        prev_le, prev_c = le, c
    return les[-1]


def quantiles(before, after, group, resource, verbs):
    """p50/p99 estimates (ms) and counts of the verbs between two /metrics snapshots."""
    a, b = buckets(before, group, resource, verbs), buckets(after, group, resource, verbs)
    res = {}
    for v in verbs:
        diff = {le: b[v].get(le, 0) - a[v].get(le, 0) for le in b[v]}
        p50, p99 = quantile(0.5, diff), quantile(0.99, diff)
        res[v] = {
            "count": int(diff.get(float("inf"), 0)),
            "p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "p99_ms": None if p99 is None else round(p99 * 1000, 2),
        }
    return res


def measure(b, api, token):
    """POSTs then PATCHes of variants of Mutation `w` at `api` (the operator runs), the client
    pinned to CPU 1; results in R[post_*] and R[patch_*]."""
    R = b.R
    for kind in ("post", "patch"):
        before, after = b.path(f"apiserver-metrics-{kind}-before.txt"), b.path(f"apiserver-metrics-{kind}-after.txt")
        with open(before, "w") as out:
            b.kubectl("get", "--raw", "/metrics", stdout=out)
        if kind == "post":
            log(f"POST variant x {b.WRITES} (labels p0000.., instances 0), sequential")
            res = client(b.WRITES, "POST", f"{api}/mutations/w/variants", token,
                         '{"label":"p{i}","env":{"BENCH":"p{i}"},"instances":0}', pin="1")
        else:
            log(f"PATCH variant x {b.WRITES} (p0000.. to instances 1), sequential")
            res = client(b.WRITES, "PATCH", f"{api}/mutations/w/variants/p{{i}}", token, '{"instances":1}', pin="1")
        write_json(b.path(f"latency-{kind}.json"), res)
        with open(after, "w") as out:
            b.kubectl("get", "--raw", "/metrics", stdout=out)
        srv = quantiles(before, after, "neiam.org", "mutations", ("GET", "PATCH"))
        write_json(b.path(f"apiserver-{kind}.json"), srv)
        R[f"{kind}_p50"], R[f"{kind}_p99"] = num(res["p50_ms"]), num(res["p99_ms"])
        for verb in ("GET", "PATCH"):
            R[f"{kind}_srv_{verb}_n"] = num(srv[verb]["count"])
            R[f"{kind}_srv_{verb}_p50"] = num(srv[verb]["p50_ms"])
            R[f"{kind}_srv_{verb}_p99"] = num(srv[verb]["p99_ms"])
        log(f"{kind}: p50 {R[kind + '_p50']} ms, p99 {R[kind + '_p99']} ms; "
            f"API server PATCH p99 ~{R[kind + '_srv_PATCH_p99']} ms")


if __name__ == "__main__":
    if len(sys.argv) not in (6, 7):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    print(json.dumps(sequential(int(sys.argv[1]), *sys.argv[2:])))
