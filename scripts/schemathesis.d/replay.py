"""scripts/schemathesis's check of the cluster: counts the recorded exchanges, replays the
accepted ones in order against a model of what they imply, and checks the end state.

    replay.py NS OUT MIN_REQUESTS RUN...

OUT holds what the script wrote: the create bodies of the seed Mutations (`seeds.jsonl`), the
enrollments made before the runs (`enrolled.jsonl`), each run's HAR and JUnit report, and the
end state (`listed.json`: GET .../mutations; `objects.json`: the Mutation objects;
`secrets.json`: the Secrets). API and ADMIN_TOKEN (environment) reach the operator for the
last checks: each Mutation's devices as the API lists them, and which device tokens work.

The model holds every Mutation by name: its variants [(label, env, instances, placement)] in
order, and with `spec.devices` its devices (id -> variant label), the variants enrollment made,
the tokens of its devices and what each device reported in its headers. Each answer in the test
namespace must agree with it (a 2xx, and also a 404 or 409 that says something is absent or
taken; and a device's token must answer 401 exactly when it is dead), and each accepted write
changes it.
"""

import base64
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from decimal import Decimal

ns, out, minimum, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
prefix = f"/api/v1/namespaces/{ns}/mutations"
problems = []
LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
# A Mutation's name is a DNS-1123 subdomain (dots allowed), at most 253 characters.
NAME = re.compile(r"(?=.{1,253}$)[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*")
DEVICE_ID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
TOKEN = re.compile(r"[0-9a-f]{64}")
DEFAULT_MAX_DEVICES = 50


def body(text):
    try:
        return json.loads(text) if text else None
    except ValueError:
        return None


def variants_of(view):
    """A Mutation view's (or object's) variants as [(label, env, instances, placement)], in
    order; placement is its nodeSelector, tolerations and containers (R37) as one JSON text,
    empty ones and left-out ones alike."""
    def placement(v):
        return json.dumps([v.get("nodeSelector") or {}, v.get("tolerations") or [],
                           v.get("containers") or []], sort_keys=True)
    return [(v["label"], v.get("env") or {}, v.get("instances", 1), placement(v)) for v in view]


def quantity(q):
    """A quantity as the operator keeps it: a string as sent, a number as Rust prints it."""
    if isinstance(q, bool) or not isinstance(q, (int, float)):
        return q
    if isinstance(q, int) and -(2**63) <= q < 2**64:
        return str(q)
    text = format(Decimal(repr(float(q))), "f")  # serde_json reads a bigger one as an f64
    return text.rstrip("0").rstrip(".") if "." in text else text


def as_shown(v):
    """A variant request as the API shows the variant: tolerations without their empty fields,
    quantities as strings, containers without what they leave out."""
    tolerations = [{k: x for k, x in t.items() if x not in ("", None)} for t in v.get("tolerations") or []]
    containers = []
    for c in v.get("containers") or []:
        shown = {"name": c["name"]}
        if c.get("image") is not None:
            shown["image"] = c["image"]
        if c.get("resources") is not None:
            shown["resources"] = {
                kind: {k: quantity(q) for k, q in c["resources"][kind].items()}
                for kind in ("limits", "requests") if c["resources"].get(kind)
            }
        containers.append(shown)
    return {**v, "tolerations": tolerations, "containers": containers}


def labels(variants):
    return [v[0] for v in variants]


def foreign(answer):
    """A 409 because a name belongs to someone else: a variant's Deployment name is another
    owner's Deployment (R9), or Secret <name>-devices is not the Mutation's (one
    of a deleted Mutation of that name that garbage collection has not removed yet). The model
    of names and labels has nothing to say about it."""
    error = str(answer.get("error", "")) if isinstance(answer, dict) else ""
    return "already exists and" in error or "is not owned by mutation" in error


def error_of(answer):
    return str(answer.get("error", "")) if isinstance(answer, dict) else ""


def millivolts(text):
    whole, _, fraction = text.partition(".")
    return int(whole) * 1000 + int((fraction + "000")[:3])


# What a device's headers report, as the operator reads them (api/heartbeats.rs): the field and
# how its value is read.
REPORTS = {
    "refresh-rate": ("refreshRate", int),
    "battery-voltage": ("batteryMillivolts", millivolts),
    "rssi": ("rssi", int),
    "fw-version": ("fwVersion", str),
    "width": ("width", int),
    "height": ("height", int),
}


class Mutation:
    """What the accepted requests say of one Mutation."""

    def __init__(self, variants, devices=None):
        self.variants = variants
        # None: no spec.devices; else the devices' variants by id
        self.devices = None if devices is None else {}
        self.max_devices = (devices or {}).get("maxDevices") or DEFAULT_MAX_DEVICES
        self.made = set()  # the labels of the variants enrollment made
        self.tokens = {}  # id -> its token
        self.reported = {}  # id -> what it reported

    def __repr__(self):
        devices = "" if self.devices is None else f", devices {self.devices}, made {sorted(self.made)}"
        return f"{self.variants}{devices}"


state = {}
tokens = {}  # every device token answered: token -> [name, id, whether it works]
gone = {}  # (Mutation, device id) -> the exchange that removed the device
figures = {"enrolled": 0, "made": 0, "removed": 0, "unmade": 0, "rotated": 0, "polled": 0}


def kill(token):
    if token in tokens:
        tokens[token][2] = False


def kill_tokens(m):
    for token in m.tokens.values():
        kill(token)


def create(sent, answer):
    devices = sent.get("devices") if isinstance(sent, dict) else None
    state[answer["name"]] = Mutation(variants_of(answer["variants"]),
                                     devices if isinstance(devices, dict) else None)


def enrolled(name, m, sent, answer, expect):
    """An enrollment answered 201 `answer` for `sent`."""
    did = sent["id"]
    expect(m.devices is not None, "enrolled into a Mutation without spec.devices")
    if m.devices is None:
        return
    expect(did not in m.devices, "enrolled an id that is enrolled")
    expect(len(m.devices) < m.max_devices, f"enrolled past maxDevices {m.max_devices}")
    expect(answer.get("id") == did, f"answered id {answer.get('id')!r}")
    expect(bool(TOKEN.fullmatch(str(answer.get("token")))), "answered a token that is not 64 hex")
    if sent.get("variant") is not None:
        label = sent["variant"]["label"]
        expect(label not in labels(m.variants), "enrolled with a new variant whose label exists")
        m.variants.append(variants_of([as_shown(sent["variant"])])[0])
        m.made.add(label)
        figures["made"] += 1
    else:
        label = sent["label"]
        expect(label in labels(m.variants), "enrolled into a variant that does not exist")
    expect(answer.get("variant") == label, f"answered variant {answer.get('variant')!r}")
    figures["enrolled"] += 1
    m.devices[did] = label
    m.tokens[did] = answer.get("token")
    m.reported[did] = {}
    tokens[answer.get("token")] = [name, did, True]


def removed(name, m, did, where):
    """Device `did` was removed: it is gone, its token dead, and the variant its enrollment
    made goes with its last device (devices::remove)."""
    gone[(name, did)] = where
    figures["removed"] += 1
    label = m.devices.pop(did)
    kill(m.tokens.pop(did, None))
    m.reported.pop(did, None)
    if label not in m.devices.values():
        made = label in m.made
        m.made.discard(label)
        if made and label in labels(m.variants):
            m.variants.pop(labels(m.variants).index(label))
            figures["unmade"] += 1


def shown(answer):
    """The device ids a device answer shows."""
    if isinstance(answer, list):
        return [d.get("id") for d in answer if isinstance(d, dict)]
    return [answer.get("id")] if isinstance(answer, dict) and "enrolledAt" in answer else []


def bearer(entry):
    for h in entry["request"].get("headers", []):
        if h["name"].lower() == "authorization" and h["value"].lower().startswith("bearer "):
            return h["value"][7:].strip()
    return None


def heard(status, answer):
    """Whether the operator took this device request as a heartbeat with its headers (the
    request got past the token, the namespace, what the token may call and the headers:
    api/mod.rs)."""
    error = error_of(answer)
    if status == 401 or (status == 503 and (error.startswith("starting") or "has not reached" in error)):
        return False
    # Over the token's or the address's share of busy connections: refused before anything.
    if status == 503 and "in flight" in error:
        return False
    if status == 403 and "token reaches only" in error:
        return False
    if status == 400 and (error.startswith("header ") or " in the path: " in error):
        return False
    return True


def report(entry):
    """What a device request's headers report (those that parse; a malformed one refuses the
    request, which `heard` leaves out)."""
    out = {}
    for h in entry["request"].get("headers", []):
        name = h["name"].lower()
        if name in REPORTS:
            field, read = REPORTS[name]
            out[field] = read(h["value"].strip())
    return out


# The seeds, as created before the runs, and the enrollments made before the runs.
with open(f"{out}/seeds.jsonl") as f:
    for line in f:
        if line.strip():
            seed = json.loads(line)
            create(seed["sent"], seed["answer"])
with open(f"{out}/enrolled.jsonl") as f:
    for line in f:
        if line.strip():
            e = json.loads(line)
            m = state[e["name"]]
            enrolled(e["name"], m, e["sent"], e["answer"],
                     lambda ok, what: ok or problems.append(f"setup: {what}"))

total = server_errors = checked = 0
by_status = {}
for run in runs:
    with open(f"{out}/{run}.har") as f:
        entries = json.load(f)["log"]["entries"]
    entries.sort(key=lambda e: e["startedDateTime"])
    for e in entries:
        total += 1
        status = e["response"]["status"]
        by_status[status] = by_status.get(status, 0) + 1
        if status >= 500:
            server_errors += 1
        method = e["request"]["method"]
        path = urllib.parse.unquote(urllib.parse.urlsplit(e["request"]["url"]).path)
        if not (path == prefix or path.startswith(prefix + "/")):
            continue
        parts = path[len(prefix):].split("/")[1:]
        # parts: [name], [name, "variants"], [name, "variants", label], [name, "devices"],
        # [name, "devices", id], [name, "devices", id, "token" or "poll"],
        # [name, "rollout", "resume" or "abort"]
        if parts and not NAME.fullmatch(parts[0]):
            continue
        kind = parts[1] if len(parts) > 1 else None
        if len(parts) > 2 and not (LABEL if kind == "variants" else DEVICE_ID).fullmatch(parts[2]):
            continue
        answer = body(e["response"].get("content", {}).get("text"))
        sent = body((e["request"].get("postData") or {}).get("text"))
        where = f"{run}: {method} {path} -> {status}"
        name = parts[0] if parts else None
        m = state.get(name)
        have = m.variants if m is not None else None
        devices = m.devices if m is not None else None

        def expect(ok, what):
            if not ok:
                ghosts = [f"{did} (removed by {gone[(name, did)]})" for did in shown(answer)
                          if (name, did) in gone and did not in (devices or {})]
                ghosts = f"; shows removed devices: {', '.join(ghosts)}" if ghosts else ""
                problems.append(f"{where}: {what}{ghosts}; the accepted requests say {state}")

        # A device's token works while its device is enrolled, on its own Mutation (R39).
        token = bearer(e)
        owner = tokens.get(token)
        if owner is not None and name is not None:
            if not owner[2] or owner[0] != name:
                expect(status in (400, 401), "a dead device token, or one of another Mutation, was not refused")
            else:
                expect(status != 401, f"device {owner[1]}'s token answered 401")
                if heard(status, answer) and m is not None and owner[1] in m.reported:
                    m.reported[owner[1]].update(report(e))

        if not (200 <= status < 300 or status in (404, 409)):
            continue  # refused before the operation: bad input, auth, wrong method
        label = parts[2] if kind == "variants" and len(parts) == 3 else None
        if label is None and method == "POST" and parts[1:] == ["variants"] and isinstance(sent, dict):
            label = sent.get("label")
        has_label = have is not None and label in labels(have)
        did = parts[2] if kind == "devices" and len(parts) > 2 else None
        has_device = devices is not None and did in devices
        checked += 1

        def shows(d):
            """Whether a DeviceStatus answered agrees with the model."""
            return (devices is not None and d.get("id") in devices
                    and d.get("variant") == devices[d["id"]]
                    and (d.get("reported") or {}) == m.reported.get(d["id"], {}))

        key = (method, kind, len(parts))
        if key == ("GET", None, 0) and status == 200:
            seen = {v["name"]: variants_of(v["variants"]) for v in answer}
            expect(seen == {n: s.variants for n, s in state.items()}, f"listed {seen}")
            # go on from what the server said
            for n in list(state):
                if n not in seen:
                    kill_tokens(state.pop(n))
            for n, variants in seen.items():
                state.setdefault(n, Mutation([])).variants = variants
        elif key == ("POST", None, 0) and status == 201:
            expect(answer["name"] not in state, "created a Mutation that exists")
            create(sent, answer)
        elif key == ("POST", None, 0) and status == 409:
            # taken: the name, or a variant's Deployment name (someone else's Deployment)
            expect((isinstance(sent, dict) and sent.get("name") in state) or foreign(answer),
                   "409 for a new name")
        elif key == ("GET", None, 1) and status == 200:
            expect(have == variants_of(answer["variants"]), f"answered {answer['variants']}")
        elif key == ("DELETE", None, 1) and status == 204:
            expect(m is not None, "deleted a Mutation that does not exist")
            if m is not None:
                kill_tokens(state.pop(name))
        elif len(parts) <= 2 and status == 404 and key != ("POST", "devices", 2):
            expect(m is None, "404 for a Mutation that exists")
        elif key == ("GET", "variants", 2) and status == 200:
            expect(have == variants_of(answer), f"answered {answer}")
        elif key == ("POST", "variants", 2) and status == 201:
            expect(have is not None and not has_label, "added a variant that exists")
            if have is not None:
                have.append(variants_of([answer])[0])
        elif key == ("POST", "variants", 2) and status == 409:
            expect(has_label or foreign(answer), "409 for a new label")
        elif kind == "variants" and len(parts) == 3 and status == 404:
            expect(not has_label, "404 for a variant that exists")
        elif key == ("GET", "variants", 3) and status == 200:
            if owner is not None:
                # a device's answer carries no env values (R39): all but the env
                got = variants_of([answer])[0]
                expect("env" not in answer and has_label
                       and any((h[0], h[2], h[3]) == (got[0], got[2], got[3]) for h in have),
                       f"answered a device {answer}")
            else:
                expect(has_label and variants_of([answer])[0] in have, f"answered {answer}")
        elif key == ("PATCH", "variants", 3) and status == 200:
            expect(has_label, "scaled a variant that does not exist")
            if has_label:
                i = labels(have).index(label)
                # R21: scaling changes the replica count only; env and placement are kept
                old = have[i]
                if owner is not None:
                    # a device's answer carries no env values (R39)
                    expect("env" not in answer and variants_of([answer])[0][3] == old[3],
                           f"scaled into {answer}")
                else:
                    expect(variants_of([answer])[0][1::2] == old[1::2], f"scaled into {answer}")
                have[i] = (old[0], old[1], answer["instances"], old[3])
        elif key == ("DELETE", "variants", 3) and status == 204:
            expect(has_label, "removed a variant that does not exist")
            if has_label:
                have.pop(labels(have).index(label))
        # --- devices (R39) ---
        elif key == ("POST", "devices", 2) and status == 201:
            expect(m is not None and isinstance(sent, dict), "enrolled into a Mutation that does not exist")
            if m is not None and isinstance(sent, dict):
                enrolled(name, m, sent, answer, expect)
        elif key == ("POST", "devices", 2) and status == 404:
            # no such Mutation (to the admin), or `label` names no variant of it
            expect(m is None or (devices is not None and isinstance(sent, dict)
                                 and sent.get("variant") is None
                                 and sent.get("label") not in labels(have)),
                   "404 for an enrollment whose Mutation and variant exist")
        elif key == ("POST", "devices", 2) and status == 409:
            # no spec.devices, the id taken, the new variant's label taken, a foreign name
            new = (sent or {}).get("variant") if isinstance(sent, dict) else None
            expect(m is not None and (
                devices is None or foreign(answer)
                or (isinstance(sent, dict) and sent.get("id") in devices)
                or (isinstance(new, dict) and new.get("label") in labels(have))),
                "409 for an enrollment that nothing refuses")
        elif kind == "devices" and status == 409:
            expect(m is not None and (devices is None or foreign(answer)),
                   "409 for a Mutation with spec.devices")
        elif key == ("GET", "devices", 2) and status == 200:
            listed = {d.get("id"): d.get("variant") for d in answer}
            expect(devices is not None and listed == devices and len(listed) == len(answer),
                   f"listed devices {listed}")
            expect(all(shows(d) for d in answer), f"listed {answer}")
        elif len(parts) == 4 and kind in ("variants", "devices") and parts[3] == "screen":
            # R53: the API's create takes no spec.screen, so none of the model's Mutations has
            # one: every screen route answers 404 (no Mutation, variant or device, or no
            # spec.screen), never a screen.
            expect(status == 404, f"a screen route answered {status}")
        elif kind == "devices" and len(parts) >= 3 and parts[3:] != ["poll"] and status == 404:
            expect(m is None or (devices is not None and not has_device),
                   "404 for a device that is enrolled, or of a Mutation without spec.devices")
        elif key == ("GET", "devices", 3) and status == 200:
            expect(has_device and answer.get("id") == did and shows(answer), f"answered {answer}")
        elif key == ("DELETE", "devices", 3) and status == 204:
            expect(has_device, "removed a device that is not enrolled")
            if has_device:
                removed(name, m, did, where)
        elif key == ("POST", "devices", 4) and parts[3] == "token" and status == 200:
            expect(has_device and answer.get("id") == did, f"gave a new token: {answer}")
            expect(bool(TOKEN.fullmatch(str(answer.get("token")))), "answered a token that is not 64 hex")
            if has_device:
                figures["rotated"] += 1
                kill(m.tokens.get(did))
                m.tokens[did] = answer.get("token")
                tokens[answer.get("token")] = [name, did, True]
        elif key == ("GET", "devices", 4) and parts[3] == "poll" and status == 200:
            expect(has_device and owner == [name, did, True], "a poll answered for a device not its token's")
            expect(has_device and answer.get("variant") == devices[did], f"polled {answer}")
            figures["polled"] += 1
        elif kind == "rollout" and len(parts) == 3 and status == 409:
            # The API's create takes no spec.rollout: none of the model's Mutations has one.
            expect(m is not None, "409 for the rollout of a Mutation that does not exist")
        elif kind == "rollout" and len(parts) == 3 and status == 404:
            expect(m is None, "404 for the rollout of a Mutation that exists")
        else:
            checked -= 1
            problems.append(f"{where}: an answer the API does not give")

# Failures as Schemathesis reported them (JUnit: one test case per operation and run).
failures = []
for run in runs:
    for case in ET.parse(f"{out}/{run}.junit.xml").getroot().iter("testcase"):
        for bad in list(case.iter("failure")) + list(case.iter("error")):
            text = (bad.get("message") or "") + "\n" + (bad.text or "")
            failures.append(f"{run}: {case.get('name')}: {text.strip()[:2000]}")

# The end state: the API's list and the objects both say exactly what the writes said; each
# Mutation with spec.devices has exactly the model's devices and made variants, in its devices
# Secret (owned by it), its status.devices and what the API lists; each device's last token
# works, every replaced or removed one answers 401.
expected = {n: m.variants for n, m in state.items()}
listed = {v["name"]: variants_of(v["variants"]) for v in json.load(open(f"{out}/listed.json"))}
objects = {o["metadata"]["name"]: o for o in json.load(open(f"{out}/objects.json"))["items"]}
if listed != expected:
    problems.append(f"GET .../mutations at the end: {listed}\n  expected: {expected}")
seen = {n: variants_of(o["spec"].get("variants") or []) for n, o in objects.items()}
if seen != expected:
    problems.append(f"Mutation objects at the end: {seen}\n  expected: {expected}")
secrets = {s["metadata"]["name"]: s for s in json.load(open(f"{out}/secrets.json"))["items"]}
api, admin = os.environ["API"], os.environ["ADMIN_TOKEN"]


def call(path, token):
    request = urllib.request.Request(f"{api}/api/v1/namespaces/{ns}/mutations/{path}",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as err:
        return err.code, body(err.read().decode("utf-8", "replace"))


devices_total = 0
for n, m in state.items():
    o = objects.get(n)
    if o is None:
        continue
    has_spec = o["spec"].get("devices") is not None
    if has_spec != (m.devices is not None):
        problems.append(f"Mutation {n}: spec.devices {'set' if has_spec else 'not set'} at the end")
    if m.devices is None:
        continue
    devices_total += len(m.devices)
    secret = secrets.get(f"{n}-devices")
    owned = secret is not None and any(r.get("uid") == o["metadata"]["uid"]
                                       for r in secret["metadata"].get("ownerReferences") or [])
    data = {k: base64.b64decode(v).decode() for k, v in ((secret or {}).get("data") or {}).items()} if owned else {}
    kept = {k[len("device."):]: v.split(" ")[1] for k, v in data.items() if k.startswith("device.")}
    made = set(filter(None, data.get("made-variants", "").split(",")))
    if kept != m.devices or made != m.made:
        problems.append(f"Secret {n}-devices at the end: devices {kept}, made {sorted(made)}\n"
                        f"  expected: devices {m.devices}, made {sorted(m.made)}")
    status = {d.get("id"): d.get("variant") for d in (o.get("status") or {}).get("devices") or []}
    if status != m.devices:
        problems.append(f"Mutation {n}'s status.devices at the end: {status}\n  expected: {m.devices}"
                        + "".join(f"\n  {did} was removed by {gone[(n, did)]}" for did in status
                                  if (n, did) in gone and did not in m.devices))
    code, answer = call(f"{n}/devices", admin)
    ids = {d.get("id"): d.get("variant") for d in answer} if code == 200 and isinstance(answer, list) else None
    if ids != m.devices:
        problems.append(f"GET .../{n}/devices at the end: {code} {answer}\n  expected: {m.devices}")
    for did, token in m.tokens.items():
        code, answer = call(f"{n}/devices/{did}", token)
        if code != 200 or not isinstance(answer, dict) or answer.get("variant") != m.devices[did]:
            problems.append(f"device {n}/{did}'s last token at the end: {code} {answer}")
# A dead token is tried on its own device's record (which may be enrolled again, with another
# token): 401.
dead = [(t, n, did) for t, (n, did, works) in tokens.items() if t and not works]
for token, n, did in dead[:60]:
    code, answer = call(f"{n}/devices/{did}", token)
    if code != 401:
        problems.append(f"device {n}/{did}'s replaced or removed token answered {code} {answer}")

print(f"requests sent:        {total} ({' + '.join(runs)})")
print(f"answers by status:    {dict(sorted(by_status.items()))}")
print(f"server errors (5xx):  {server_errors}")
print(f"check failures:       {len(failures)}")
print(f"answers replayed:     {checked} (2xx, 404 and 409 in the test namespace)")
print(f"devices:              {figures['enrolled']} enrolled, the setup's too ({figures['made']} with a variant of "
      f"their own), {figures['removed']} removed ({figures['unmade']} taking their variant along), "
      f"{figures['rotated']} new tokens, {figures['polled']} polls answered")
print(f"Mutations at the end: {len(state)} ({sum(len(m.variants) for m in state.values())} variants, "
      f"{devices_total} devices; {len(dead)} device tokens replaced or removed); the answers, the "
      f"list, the objects and the Secrets agree with the accepted requests: {not problems}")
for f in failures:
    print(f"FAILURE {f}")
for p in problems:
    print(f"STATE {p}")
ok = not failures and not problems and server_errors == 0 and total >= minimum
if total < minimum:
    print(f"only {total} requests: at least {minimum} are required (raise "
          "MUTANTOPS_SCHEMATHESIS_EXAMPLES)")
sys.exit(0 if ok else 1)
