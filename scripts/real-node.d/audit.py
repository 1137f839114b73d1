"""What the operator wrote during one phase of an upgrade, from the API server's audit log
(scripts/upgrade, R45).

  audit.py LOG OFFSET USER OUTGOING INCOMING KEEP

LOG is the audit log (JSON lines, Metadata level), read from byte OFFSET on (where it ended
when the phase began). USER is the operator's ServiceAccount user. OUTGOING and INCOMING are
the replicas (pod names, comma-separated) of the version being replaced and of the one
replacing it; each request is told apart by the pod name the kubelet's bound token carries
(user.extra authentication.kubernetes.io/pod-name). KEEP is a file of objects that must not be
written at all, one `resource namespace name` per line (the variants' Deployments and
Services, whose content both versions agree on).

Prints, per resource, the writes (create, update, patch, delete) of each version, and fails
(exit 1, naming each) when:
  - an object of KEEP was written by either version;
  - an object was written back and forth: its writes went from one version to the other and
    back again (Leases, which the two hand over by design, and Events excepted);
  - a write came from a pod of neither list, or with no pod name.
"""

import collections
import json
import sys

WRITES = {"create", "update", "patch", "delete", "deletecollection"}


def main():
    if len(sys.argv) != 7:
        sys.exit(__doc__)
    log, offset, user, outgoing, incoming, keep_file = sys.argv[1:]
    version = {p: "outgoing" for p in outgoing.split(",") if p}
    version.update({p: "incoming" for p in incoming.split(",") if p})
    with open(keep_file, encoding="utf-8") as f:
        keep = {tuple(line.split()) for line in f if line.strip()}

    problems, per_object = [], collections.defaultdict(list)
    counts = collections.Counter()
    with open(log, "rb") as f:
        f.seek(int(offset))
        for raw in f:
            try:
                e = json.loads(raw)
            except ValueError:
                continue  # a line cut by the phase's end: not this phase's
            if e.get("user", {}).get("username") != user or e.get("verb") not in WRITES:
                continue
            if e.get("stage") != "ResponseComplete":
                continue
            ref = e.get("objectRef", {})
            resource = ref.get("resource", "?") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            key = (ref.get("resource", "?"), ref.get("namespace", ""), ref.get("name", ""))
            pod = (e.get("user", {}).get("extra", {}).get("authentication.kubernetes.io/pod-name") or ["?"])[0]
            who = version.get(pod)
            code = e.get("responseStatus", {}).get("code", 0)
            what = f"{e['verb']} {resource} {key[1]}/{key[2]} by {pod} ({code})"
            if who is None:
                problems.append(f"a write from a pod of neither version: {what}")
                continue
            counts[(resource, who, "ok" if code < 300 else "refused")] += 1
            if key in keep:
                problems.append(f"an object both versions agree on was written: {what}")
            if code < 300 and key[0] not in ("leases", "events"):
                per_object[(resource, key[1], key[2])].append((e.get("requestReceivedTimestamp", ""), who, what))

    for obj, writes in sorted(per_object.items()):
        writes.sort()
        switches = sum(1 for a, b in zip(writes, writes[1:]) if a[1] != b[1])
        if switches >= 2:
            problems.append(f"{obj[0]} {obj[1]}/{obj[2]} written back and forth: "
                            + "; ".join(w[2] for w in writes))

    print(f"    {'resource':<34} {'outgoing':>9} {'incoming':>9} {'refused':>8}")
    for resource in sorted({r for r, _, _ in counts}):
        o, i = counts[(resource, "outgoing", "ok")], counts[(resource, "incoming", "ok")]
        refused = counts[(resource, "outgoing", "refused")] + counts[(resource, "incoming", "refused")]
        print(f"    {resource:<34} {o:>9} {i:>9} {refused:>8}")
    if not counts:
        print("    (no writes)")
    for p in problems:
        print(f"PROBLEM {p}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
