"""One point of the scale curve: N owners x V variants created in a namespace of their own, by
parallel `kubectl create` of JSON Lists, and timed until they converged. The owners are
Mutations (the operator's) or, for the peer, Argo Rollouts Experiments of V templates; both
carry the same pod template and env vars with 0 replicas, so kwok runs no pods.

Mutations have converged when all N*V Deployments are `<mutation>-v<j>`, controlled by their
Mutation, with `replicas: 0` and both env vars (the operator's writes done), the Deployment
controller has observed all of them, and every Mutation reports Ready; Experiments when all
N*V ReplicaSets exist (controlled by an Experiment, observed by the ReplicaSet controller) and
every Experiment is Running with all its templates Running.
"""

import json
import time
from pathlib import Path

import cpu
from common import die, log, num, tenths, write_json
from kube import Watch

# --- the objects ----------------------------------------------------------------------------------


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


def experiment(ns, i, templates):
    """The peer's counterpart of mutation(): the same pod template, one Experiment template per
    variant, each with its own selector (an Experiment's ReplicaSets must not overlap), no
    duration (it runs until deleted)."""
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


def write_parts(make, ns, n, v, parts, out):
    """make(ns, i, v) for i < n, dealt round-robin into `parts` List files out/part-K.json."""
    lists = [[] for _ in range(parts)]
    for i in range(n):
        lists[i % parts].append(make(ns, i, v))
    for k, items in enumerate(lists):
        with open(Path(out) / f"part-{k}.json", "w") as f:
            json.dump({"apiVersion": "v1", "kind": "List", "items": items}, f)


# --- when they have converged ---------------------------------------------------------------------


def deployment_observed(d):
    """The Deployment controller has observed the Deployment's generation and reports 0
    replicas: what the operator waits for before it calls a variant with 0 instances Ready."""
    st = d.get("status") or {}
    return (st.get("observedGeneration") or 0) >= (d["metadata"].get("generation") or 0) and all(
        (st.get(k) or 0) == 0 for k in ("replicas", "updatedReplicas", "readyReplicas"))


def deployment_ok(d):
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


def mutation_watch(kube, ns, n, v):
    watch = Watch(kube, {
        f"/apis/apps/v1/namespaces/{ns}/deployments?labelSelector=mutantops.neiam.org%2Fkind%3Dmutation":
            lambda d: (deployment_ok(d), deployment_observed(d)),
        f"/apis/neiam.org/v1/namespaces/{ns}/mutations": lambda m: mutation_ready(m, v),
    }, lambda deps, muts: {
        "deployments": sum(1 for ok, _ in deps.values() if ok),
        "observed": sum(1 for ok, seen in deps.values() if ok and seen),
        "ready": sum(1 for ok in muts.values() if ok),
    })
    return watch, {"deployments": n * v, "observed": n * v, "ready": n}


def experiment_watch(kube, ns, n, v):
    watch = Watch(kube, {
        f"/apis/apps/v1/namespaces/{ns}/replicasets": replicaset_ok,
        f"/apis/argoproj.io/v1alpha1/namespaces/{ns}/experiments": lambda e: experiment_running(e, v),
    }, lambda sets, exps: {
        "replicasets": sum(1 for ok in sets.values() if ok),
        "running": sum(1 for ok in exps.values() if ok),
    })
    return watch, {"replicasets": n * v, "running": n}


# --- a point ----------------------------------------------------------------------------------------

KINDS = {
    # kind: (make, watch, what the objects are called, user agent of the controller)
    "mutations": (mutation, mutation_watch, "Mutations", "mutantops/"),
    "experiments": (experiment, experiment_watch, "Experiments", "rollouts-controller/"),
}


def point(b, kind, ns, n, folder, timeout):
    """Creates n owners of kind `kind` x b.V variants in namespace `ns` (which exists) while a
    watcher waits up to `timeout` s, counted from the start of the create, for them to
    converge. Returns a dict: the seconds since that start when each milestone was reached
    (tenths, None when not within the timeout), the last counts, whether all were reached
    (`converged`), `apply_s` (the create itself) and the controller's requests (`requests`,
    audit log, between a mark taken before the first create and one at convergence), also
    written to `folder` as converge.json and requests.json; and the CPU each process used
    (cpu.py) until the controller's writes were done (`cpu_writes`, when they were) and until
    convergence (`cpu_all`)."""
    make, watch_of, what, agent = KINDS[kind]
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    parts = min(n, b.PARALLEL)
    write_parts(make, ns, n, b.V, parts, folder)
    watch, targets = watch_of(b.kube, ns, n, b.V)
    try:
        watch.start()
    except RuntimeError as e:
        die(f"the convergence watcher failed: {e}")
    controller = b.operator_pid() if kind == "mutations" else b.peer.pid
    sampler = cpu.Sampler({**cpu.cluster_pids(b.cluster_dir), agent.rstrip("/"): controller})
    sampler.start()
    start_mark = b.audit_mark()
    t0 = time.time()
    log(f"applying: {parts} x kubectl create -f <List of {n // parts}+ {what}>")
    b.create_parts(folder, parts)
    apply_s = time.time() - t0
    log(f"applied in {apply_s:.1f} s; waiting for convergence (up to {timeout}s)")
    try:
        reached, last = watch.wait(targets, t0 + timeout)
    except RuntimeError as e:
        die(f"the convergence watcher failed: {e}")
    end_mark = b.audit_mark()
    sampler.stop()
    writes_done = reached.get("deployments") or reached.get("replicasets")
    res = {k: None if t is None else tenths(t - t0) for k, t in reached.items()}
    res["cpu_writes"] = sampler.between(t0, writes_done) if writes_done else None
    res["cpu_all"] = sampler.between(t0, time.time())
    res.update({f"{k}_count": last[k] for k in targets})
    res["converged"] = all(t is not None for t in reached.values())
    res["apply_s"] = f"{apply_s:.1f}"
    write_json(folder / "converge.json", res)
    res["requests"] = b.requests(start_mark, end_mark, folder / "requests.json", agent)
    if not res["converged"]:
        log(f"not converged after {timeout}s: " + ", ".join(
            f"{last[k]}/{want} {k}" for k, want in targets.items()))
    return res


def since(res, key, want, timeout):
    """A milestone as the table shows it: "12.3 s", or "not within T s (count/want)"."""
    if res[key] is not None:
        return f"{num(res[key])} s"
    return f"not within {timeout} s ({res[key + '_count']}/{want})"
