"""Counting a client's requests in the API server's audit log (`MUTANTOPS_AUDIT_LOG`, Metadata
level, written by scripts/cluster) between two marks."""

import json
import os
import urllib.parse


def mark(path):
    """A mark (inode:size) of the audit log: where the requests to count start or end."""
    try:
        st = os.stat(path)
        return f"{st.st_ino}:{st.st_size}"
    except FileNotFoundError:
        return "0:0"


def lines(path, start_mark, end_mark):
    """Lines written after `start_mark` (and before `end_mark`): the log rotates (kube-apiserver
    renames it to audit-<time>.log), so the part after the mark may start in the rotated file."""
    ino, off = (int(x) for x in start_mark.split(":"))
    end_ino, end_off = (int(x) for x in end_mark.split(":")) if end_mark else (None, None)
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


def count(path, start_mark, end_mark=None, agent="mutantops/"):
    """The requests of user agent `agent` between the marks: the total and by verb and by
    resource, leaving out watches (counted apart) and the Lease (coordination.k8s.io, by
    verb apart)."""
    verbs, lease, watches, first, last = {}, {}, 0, None, None
    needle = f'"userAgent":"{agent}'.encode()
    for line in lines(path, start_mark, end_mark):
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
    for key, n in verbs.items():
        verb = key.split(" ", 1)[0]
        by_verb[verb] = by_verb.get(verb, 0) + n
    return {
        "total": sum(verbs.values()),
        "by_verb": dict(sorted(by_verb.items())),
        "by_resource": dict(sorted(verbs.items())),
        "lease": dict(sorted(lease.items())),
        "watches_opened": watches,
        "first": first,
        "last": last,
    }
