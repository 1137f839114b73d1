#!/usr/bin/env python3
"""Helpers of scripts/bench (standard library only).

Subcommands (each prints its result on stdout; errors go to stderr with a non-zero exit):

  gen NS N V PARTS DIR        write N Mutations x V variants (instances 0) of namespace NS as
                              PARTS JSON List files DIR/part-K.json, for parallel `kubectl create`
  converge NS N V T0 TIMEOUT  list+watch Mutations and their Deployments in NS until all N*V
                              Deployments have the declared spec and all N Mutations report
                              Ready; print (JSON) the seconds since T0 (epoch) of the
                              milestones, also when the Deployment controller had observed
                              every Deployment; exit 3 (with the counts) after TIMEOUT s
  gen-peer NS N V PARTS DIR   the peer's workload: N Argo Rollouts Experiments x V templates
                              (replicas 0, no duration: they run until deleted), same files
  converge-peer NS N V T0 TIMEOUT
                              as converge, for the Experiments: until all N*V ReplicaSets
                              exist and all N Experiments are Running (every template
                              available); exit 3 after TIMEOUT s
  audit-mark FILE             print a mark (inode:size) of the API server's audit log
  audit-count FILE MARK [END [AGENT]]
                              count the operator's requests (user agent AGENT, default
                              mutantops/) logged after MARK (and up to the mark END), by verb;
                              JSON
  quantiles BEFORE AFTER GROUP RESOURCE VERB...
                              estimate p50/p99 of apiserver_request_duration_seconds for the
                              verbs from two /metrics snapshots (bucket differences); JSON
  startup RUNS URL CMD...     start CMD RUNS times, time each from spawn to URL answering 200,
                              stop it with SIGTERM; JSON with every run and the median
  latency N METHOD URL TOKEN BODY
                              N sequential requests over one keep-alive connection, {i} in the
                              URL and BODY replaced by the request's index (0000, 0001, ...);
                              JSON with p50/p99/max in ms
  wrk FILE                    parse `wrk --latency` output; JSON req/s, p50, p99 in ms
  status PID                  VmRSS and VmHWM of a process in KiB; JSON
  perf PERF_DATA              CPU profile from `perf record`: the top symbols and the share of
                              each crate (or the kernel, or a library); JSON
  heap PEAK LIVE              group heaptrack's heap at its peak and still live at the end (two
                              `heaptrack_print --print-flamegraph F --flamegraph-cost-type
                              peak|leaked` outputs) by the code that allocated it; JSON
"""

import http.client
import inspect
import json
import os
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.parse


def die(msg):
    print(f"bench.py: {msg}", file=sys.stderr)
    sys.exit(1)


# --- generating the scale run's objects -----------------------------------------------------


def mutation(ns, i, variants):
    name = f"m{i:04d}"
    return {
        "apiVersion": "neiam.org/v1",
        "kind": "Mutation",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "deployment": {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name},
                "spec": {
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {
                            "containers": [
                                {
                                    "name": "app",
                                    "image": "registry.example/bench:1",
                                    "env": [{"name": "BENCH_BASE", "value": "1"}],
                                }
                            ]
                        },
                    },
                },
            },
            "variants": [
                {"label": f"v{j}", "env": {"BENCH_VARIANT": f"v{j}"}, "instances": 0}
                for j in range(variants)
            ],
        },
    }


def write_parts(make, ns, n, v, parts, out):
    """make(ns, i, v) for i < n, dealt round-robin into `parts` List files out/part-K.json."""
    n, v, parts = int(n), int(v), int(parts)
    lists = [[] for _ in range(parts)]
    for i in range(n):
        lists[i % parts].append(make(ns, i, v))
    for k, items in enumerate(lists):
        with open(os.path.join(out, f"part-{k}.json"), "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)


def cmd_gen(ns, n, v, parts, out):
    write_parts(mutation, ns, n, v, parts, out)


def experiment(ns, i, templates):
    """The peer's counterpart of mutation(): the same pod template, one Experiment template per
    variant, each with its own selector (an Experiment's ReplicaSets must not overlap)."""
    name = f"e{i:04d}"

    def template(j):
        labels = {"app": name, "variant": f"v{j}"}
        return {
            "name": f"v{j}",
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "app",
                            "image": "registry.example/bench:1",
                            "env": [
                                {"name": "BENCH_BASE", "value": "1"},
                                {"name": "BENCH_VARIANT", "value": f"v{j}"},
                            ],
                        }
                    ]
                },
            },
        }

    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Experiment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"templates": [template(j) for j in range(templates)]},
    }


def cmd_gen_peer(ns, n, v, parts, out):
    write_parts(experiment, ns, n, v, parts, out)


# --- talking to the API server --------------------------------------------------------------


class Kube:
    """The API server from KUBE_SERVER, KUBE_CA (a file) and KUBE_TOKEN."""

    def __init__(self):
        try:
            server = urllib.parse.urlsplit(os.environ["KUBE_SERVER"])
            self.host, self.port = server.hostname, server.port or 443
            self.token = os.environ["KUBE_TOKEN"]
            self.ctx = ssl.create_default_context(cafile=os.environ["KUBE_CA"])
        except KeyError as e:
            die(f"{e} is not set (scripts/bench sets KUBE_SERVER, KUBE_CA, KUBE_TOKEN)")

    def conn(self, timeout=None):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def headers(self):
        return {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}

    def get(self, path):
        c = self.conn(timeout=120)
        try:
            c.request("GET", path, headers=self.headers())
            r = c.getresponse()
            body = r.read()
            if r.status != 200:
                raise RuntimeError(f"GET {path}: {r.status} {body[:300]!r}")
            return json.loads(body)
        finally:
            c.close()

    def list(self, path):
        """All items (paged) and the list's resourceVersion."""
        items, cont = [], ""
        while True:
            sep = "&" if "?" in path else "?"
            q = f"{path}{sep}limit=500" + (f"&continue={urllib.parse.quote(cont)}" if cont else "")
            page = self.get(q)
            items += page.get("items") or []
            cont = page["metadata"].get("continue") or ""
            if not cont:
                return items, page["metadata"]["resourceVersion"]


class Informer(threading.Thread):
    """List, then watch, `path`; calls on_change(obj) / on_delete(obj) under `lock`."""

    def __init__(self, kube, path, on_change, on_delete, lock, changed):
        super().__init__(daemon=True)
        self.kube, self.path = kube, path
        self.on_change, self.on_delete = on_change, on_delete
        self.lock, self.changed = lock, changed
        self.synced = threading.Event()
        self.error = None

    def run(self):
        try:
            while True:
                items, rv = self.kube.list(self.path)
                with self.lock:
                    for obj in items:
                        self.on_change(obj)
                self.synced.set()
                self.changed.set()
                while rv is not None:
                    rv = self.watch(rv)
        except Exception as e:  # reported by the main thread
            self.error = e
            self.synced.set()
            self.changed.set()

    def watch(self, rv):
        """Watch from rv; returns the rv to resume from, or None to relist (410 Gone)."""
        sep = "&" if "?" in self.path else "?"
        q = f"{self.path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}"
        c = self.kube.conn(timeout=700)
        try:
            c.request("GET", q, headers=self.kube.headers())
            r = c.getresponse()
            if r.status == 410:
                return None
            if r.status != 200:
                raise RuntimeError(f"watch {self.path}: {r.status} {r.read()[:300]!r}")
            while True:
                line = r.readline()
                if not line:
                    return rv
                ev = json.loads(line)
                kind, obj = ev["type"], ev["object"]
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        return None
                    raise RuntimeError(f"watch {self.path}: {obj}")
                rv = obj["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                with self.lock:
                    if kind == "DELETED":
                        self.on_delete(obj)
                    else:
                        self.on_change(obj)
                self.changed.set()
        finally:
            c.close()


def watch_until(informers, lock, changed, timeout, counts, targets):
    """Starts the informers; once all have listed, prints "watching" (scripts/bench then starts
    the clock and creates the objects). Then, until each count of counts() (a dict, read under
    the lock) has reached its target in `targets`, or `timeout` s: returns when each first
    reached it (epoch seconds, or None) and the last counts."""
    for inf in informers:
        inf.start()
    for inf in informers:
        inf.synced.wait()
        if inf.error:
            die(f"watching failed: {inf.error}")
    print("watching", flush=True)
    reached = dict.fromkeys(targets)
    deadline = time.time() + timeout
    while True:
        changed.wait(timeout=1)
        changed.clear()
        now = time.time()
        for inf in informers:
            if inf.error:
                die(f"watching failed: {inf.error}")
        with lock:
            last = counts()
        for key, want in targets.items():
            if reached[key] is None and last[key] >= want:
                reached[key] = now
        if all(t is not None for t in reached.values()) or now > deadline:
            return reached, last


def deployment_observed(d):
    """The Deployment controller has observed the Deployment's generation and reports 0
    replicas: what the operator waits for before it calls a variant with 0 instances Ready."""
    st = d.get("status") or {}
    return (st.get("observedGeneration") or 0) >= (d["metadata"].get("generation") or 0) and all(
        (st.get(k) or 0) == 0 for k in ("replicas", "updatedReplicas", "readyReplicas"))


def deployment_ok(d, v):
    """A generated Deployment with the declared spec: 0 replicas, the variant's env."""
    labels = d["metadata"].get("labels") or {}
    owner, label = labels.get("mutantops.neiam.org/owner"), labels.get("mutantops.neiam.org/variant")
    if not owner or not label or not label.startswith("v"):
        return False
    if d["metadata"]["name"] != f"{owner}-{label}":
        return False
    refs = d["metadata"].get("ownerReferences") or []
    if not any(r.get("controller") and r.get("kind") == "Mutation" and r.get("name") == owner for r in refs):
        return False
    spec = d.get("spec") or {}
    if spec.get("replicas") != 0:
        return False
    containers = spec["template"]["spec"]["containers"]
    return all(
        {"name": "BENCH_VARIANT", "value": label} in (c.get("env") or [])
        and {"name": "BENCH_BASE", "value": "1"} in (c.get("env") or [])
        for c in containers
    )


def mutation_ready(m, v):
    st = m.get("status") or {}
    if st.get("observedGeneration") != m["metadata"].get("generation"):
        return False
    if not st.get("secret"):
        return False
    variants = st.get("variants") or []
    if len(variants) != v or any(x.get("state") != "Ready" for x in variants):
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])


def cmd_converge(ns, n, v, t0, timeout):
    n, v, t0, timeout = int(n), int(v), float(t0), float(timeout)
    kube = Kube()
    lock, changed = threading.Lock(), threading.Event()
    deps, muts = {}, {}
    informers = [
        Informer(
            kube,
            f"/apis/apps/v1/namespaces/{ns}/deployments?labelSelector=mutantops.neiam.org%2Fkind%3Dmutation",
            lambda d: deps.__setitem__(d["metadata"]["name"], (deployment_ok(d, v), deployment_observed(d))),
            lambda d: deps.pop(d["metadata"]["name"], None),
            lock,
            changed,
        ),
        Informer(
            kube,
            f"/apis/neiam.org/v1/namespaces/{ns}/mutations",
            lambda m: muts.__setitem__(m["metadata"]["name"], mutation_ready(m, v)),
            lambda m: muts.pop(m["metadata"]["name"], None),
            lock,
            changed,
        ),
    ]
    reached, last = watch_until(
        informers, lock, changed, timeout,
        lambda: {
            "deployments": sum(1 for ok, _ in deps.values() if ok),
            "observed": sum(1 for ok, seen in deps.values() if ok and seen),
            "ready": sum(1 for ok in muts.values() if ok),
        },
        {"deployments": n * v, "observed": n * v, "ready": n},
    )
    done = all(t is not None for t in reached.values())

    def since(t):
        return None if t is None else round(t - t0, 2)

    print(json.dumps({"converged": done, "deployments": since(reached["deployments"]),
                      "observed": since(reached["observed"]), "ready": since(reached["ready"]),
                      "deployments_ok": last["deployments"], "deployments_observed": last["observed"],
                      "mutations_ready": last["ready"]}), flush=True)
    if not done:
        print(f"bench.py: not converged after {timeout:.0f}s: {last['deployments']}/{n * v} Deployments "
              f"with the declared spec ({last['observed']} observed by the Deployment controller), "
              f"{last['ready']}/{n} Mutations Ready", file=sys.stderr)
        sys.exit(3)


def experiment_running(e, v):
    st = e.get("status") or {}
    templates = st.get("templateStatuses") or []
    return st.get("phase") == "Running" and len(templates) == v and all(
        t.get("status") == "Running" for t in templates)


def replicaset_ok(rs):
    """A ReplicaSet of an Experiment, with 0 replicas, seen by the ReplicaSet controller."""
    refs = rs["metadata"].get("ownerReferences") or []
    st = rs.get("status") or {}
    return (any(r.get("controller") and r.get("kind") == "Experiment" for r in refs)
            and (rs.get("spec") or {}).get("replicas") == 0
            and (st.get("observedGeneration") or 0) >= (rs["metadata"].get("generation") or 0))


def cmd_converge_peer(ns, n, v, t0, timeout):
    n, v, t0, timeout = int(n), int(v), float(t0), float(timeout)
    kube = Kube()
    lock, changed = threading.Lock(), threading.Event()
    sets, exps = {}, {}
    informers = [
        Informer(kube, f"/apis/apps/v1/namespaces/{ns}/replicasets",
                 lambda r: sets.__setitem__(r["metadata"]["name"], replicaset_ok(r)),
                 lambda r: sets.pop(r["metadata"]["name"], None), lock, changed),
        Informer(kube, f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/experiments",
                 lambda e: exps.__setitem__(e["metadata"]["name"], experiment_running(e, v)),
                 lambda e: exps.pop(e["metadata"]["name"], None), lock, changed),
    ]
    reached, last = watch_until(
        informers, lock, changed, timeout,
        lambda: {"replicasets": sum(1 for ok in sets.values() if ok),
                 "running": sum(1 for ok in exps.values() if ok)},
        {"replicasets": n * v, "running": n},
    )
    done = all(t is not None for t in reached.values())

    def since(t):
        return None if t is None else round(t - t0, 2)

    print(json.dumps({"converged": done, "replicasets": since(reached["replicasets"]),
                      "running": since(reached["running"]), "replicasets_ok": last["replicasets"],
                      "experiments_running": last["running"]}), flush=True)
    if not done:
        print(f"bench.py: the peer did not converge after {timeout:.0f}s: {last['replicasets']}/{n * v} "
              f"ReplicaSets, {last['running']}/{n} Experiments Running", file=sys.stderr)
        sys.exit(3)


# --- the audit log ----------------------------------------------------------------------------


def cmd_audit_mark(path):
    try:
        st = os.stat(path)
        print(f"{st.st_ino}:{st.st_size}")
    except FileNotFoundError:
        print("0:0")


def audit_lines(path, mark, end):
    """Lines written after `mark` (and before `end`): the log rotates (kube-apiserver renames
    it to audit-<time>.log), so the part after the mark may start in the rotated file."""
    ino, off = (int(x) for x in mark.split(":"))
    end_ino, end_off = (int(x) for x in end.split(":")) if end else (None, None)
    d = os.path.dirname(path) or "."
    base = os.path.basename(path)
    stem = base.rsplit(".", 1)[0]
    files = []
    for f in os.listdir(d):
        if f == base or (f.startswith(stem + "-") and f.endswith(".log")):
            p = os.path.join(d, f)
            files.append((os.stat(p).st_mtime, os.stat(p).st_ino, p))
    files.sort()
    started = ino == 0
    for _, fino, p in files:
        if not started:
            if fino != ino:
                continue
            started = True
            start = off
        else:
            start = 0
        stop = end_off if fino == end_ino else None
        with open(p, "rb") as f:
            f.seek(start)
            data = f.read() if stop is None else f.read(max(0, stop - start))
        yield from data.splitlines()
        if fino == end_ino:
            return


def cmd_audit_count(path, mark, end=None, agent="mutantops/"):
    verbs, lease, watches, first, last = {}, {}, 0, None, None
    needle = f'"userAgent":"{agent}'.encode()
    for line in audit_lines(path, mark, end or None):
        if needle not in line:
            continue
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("stage") != "ResponseComplete":
            continue
        verb, uri = e.get("verb", ""), e.get("requestURI", "")
        if verb == "watch":
            watches += 1
            continue
        if "/apis/coordination.k8s.io/" in uri:
            lease[verb] = lease.get(verb, 0) + 1
            continue
        # The resource (and subresource) the request is about, for the breakdown.
        parts = urllib.parse.urlsplit(uri).path.strip("/").split("/")
        if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
            res = "/".join(parts[parts.index("namespaces") + 2:][:1] + parts[parts.index("namespaces") + 4:][:1])
        else:
            res = parts[-1]
        key = f"{verb} {res}"
        verbs[key] = verbs.get(key, 0) + 1
        first = first or e.get("requestReceivedTimestamp")
        last = e.get("stageTimestamp")
    by_verb = {}
    for key, count in verbs.items():
        verb = key.split(" ", 1)[0]
        by_verb[verb] = by_verb.get(verb, 0) + count
    print(json.dumps({
        "total": sum(verbs.values()),
        "by_verb": dict(sorted(by_verb.items())),
        "by_resource": dict(sorted(verbs.items())),
        "lease": dict(sorted(lease.items())),
        "watches_opened": watches,
        "first": first,
        "last": last,
    }))


# --- API server metrics -------------------------------------------------------------------------


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


def cmd_quantiles(before, after, group, resource, *verbs):
    a, b = buckets(before, group, resource, verbs), buckets(after, group, resource, verbs)
    res = {}
    for v in verbs:
        diff = {le: b[v].get(le, 0) - a[v].get(le, 0) for le in b[v]}
        count = diff.get(float("inf"), 0)
        p50, p99 = quantile(0.5, diff), quantile(0.99, diff)
        res[v] = {
            "count": int(count),
            "p50_ms": None if p50 is None else round(p50 * 1000, 2),
            "p99_ms": None if p99 is None else round(p99 * 1000, 2),
        }
    print(json.dumps(res))


# --- the operator's own endpoints ---------------------------------------------------------------


def http_status(url, timeout=1.0):
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        c.request("GET", u.path or "/")
        r = c.getresponse()
        r.read()
        return r.status
    except OSError:
        return None
    finally:
        c.close()


def cmd_startup(runs, url, *cmd):
    times = []
    for _ in range(int(runs)):
        start = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                if p.poll() is not None:
                    die(f"the operator exited with status {p.returncode} before {url} answered 200")
                if http_status(url, timeout=0.5) == 200:
                    times.append(time.perf_counter() - start)
                    break
                if time.perf_counter() - start > 60:
                    die(f"{url} did not answer 200 within 60s")
                time.sleep(0.005)
        finally:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    print(json.dumps({"runs_ms": [round(t * 1000, 1) for t in times],
                      "median_ms": round(statistics.median(times) * 1000, 1)}))


def cmd_latency(n, method, url, token, body_template):
    n = int(n)
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
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
            c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.close()
    times.sort()

    def pct(q):
        return round(times[min(len(times) - 1, int(q * len(times)))] * 1000, 2)

    print(json.dumps({"n": n, "p50_ms": pct(0.5), "p99_ms": pct(0.99), "max_ms": round(times[-1] * 1000, 2),
                      "mean_ms": round(statistics.mean(times) * 1000, 2)}))


def to_ms(text):
    for unit, f in (("us", 0.001), ("ms", 1.0), ("s", 1000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * f
    return float(text)


def cmd_wrk(path):
    res = {}
    with open(path) as f:
        for line in f:
            w = line.split()
            if line.startswith("Requests/sec:"):
                res["rps"] = float(w[1])
            elif len(w) == 2 and w[0] in ("50%", "75%", "90%", "99%"):
                res[f"p{w[0][:-1]}_ms"] = round(to_ms(w[1]), 3)
            elif "requests in" in line:
                res["requests"] = int(w[0])
            elif line.strip().startswith("Non-2xx or 3xx responses:"):
                res["non_2xx"] = int(w[-1])
            elif line.strip().startswith("Socket errors:"):
                res["socket_errors"] = line.strip()
    if "rps" not in res:
        die(f"no Requests/sec in {path}")
    print(json.dumps(res))


def cmd_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "Threads"):
                out[k] = int(v.split()[0])
    print(json.dumps(out))


# Groups of the memory profile: the first group with an alternative whose substrings all occur
# in a stack's frames names the stack's allocation.
HEAP_GROUPS = [
    ("reconciles in flight: Deployments built from the base (mutantops::variant)",
     [("mutantops::variant::",)]),
    ("Event recorder: published Events, kept 6 minutes (kube-runtime events)",
     [("kube_runtime::events::",)]),
    ("reconciles in flight: their API requests and responses (kube-client)",
     [("kube_client::api::",)]),
    # Objects the watch streams decoded and the reflector stores keep (a copy each), by kind
    # where the stack names it.
    ("watch cache: Deployments (k8s-openapi Deployment)",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("deployment::Deployment",)]),
    ("watch cache: Mutations (base as serde_json::Value, env maps)",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("crd::Mutation",)]),
    ("watch cache: Secrets",
     [(w, k) for w in ("EventDecode", "TryFlatten", "OnComplete") for k in ("secret::Secret",)]),
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


def cmd_heap(peak_path, live_path):
    peak, peak_total = heap_groups(peak_path)
    live, live_total = heap_groups(live_path)
    if peak_total <= 0:
        die(f"no allocations in {peak_path}")
    names = sorted(set(peak) | set(live), key=lambda g: -(peak.get(g, 0) + live.get(g, 0)))

    def mib(b):
        return round(b / 1048576, 1)

    print(json.dumps({
        "peak_mib": mib(peak_total),
        "live_mib": mib(live_total),
        "groups": [{"name": g, "peak_mib": mib(peak.get(g, 0)), "live_mib": mib(live.get(g, 0)),
                    "peak_share": round(100 * peak.get(g, 0) / peak_total),
                    "live_share": round(100 * live.get(g, 0) / live_total) if live_total else 0}
                   for g in names
                   if peak.get(g, 0) >= 0.005 * peak_total or live.get(g, 0) >= 0.005 * max(live_total, 1)],
    }))


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


def cmd_perf(path):
    import re
    out = subprocess.run(
        ["perf", "report", "-i", path, "--stdio", "--no-children", "--sort", "dso,sym", "-g", "none",
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
    print(json.dumps({
        "crates": [{"name": c, "share": round(p, 1)} for c, p in sorted(crates.items(), key=lambda kv: -kv[1])
                   if p >= 0.5],
        "top": [{"share": p, "dso": d, "symbol": re.sub(r"::h[0-9a-f]{16}$", "", sym)[:140]}
                for p, d, k, sym in top],
    }))


COMMANDS = {
    "gen": cmd_gen,
    "converge": cmd_converge,
    "gen-peer": cmd_gen_peer,
    "converge-peer": cmd_converge_peer,
    "audit-mark": cmd_audit_mark,
    "audit-count": cmd_audit_count,
    "quantiles": cmd_quantiles,
    "startup": cmd_startup,
    "latency": cmd_latency,
    "wrk": cmd_wrk,
    "status": cmd_status,
    "heap": cmd_heap,
    "perf": cmd_perf,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in COMMANDS:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    fn, args = COMMANDS[sys.argv[1]], sys.argv[2:]
    try:
        inspect.signature(fn).bind(*args)
    except TypeError as e:
        die(f"{sys.argv[1]}: wrong arguments ({e}); see the usage at the top of {__file__}")
    fn(*args)
