"""Screens served by the API (R53): Mutation `s` with spec.screen and SCREENS variants
(instances 0), and a screen of 48,062 bytes (a 1-bit 800x480 BMP) for each in Secret
`s-screen-<variant>`, as the leader writes one (controlled by `s`, the variant's label, the ETag
and type annotations; the bench writes them, as no renderer runs on the fake node). The
operator pinned to CPU 0 and the control plane to CPU 1, as api.py does: its VmRSS before the
Secrets and 10 s after every screen is served from its cache (the difference is what SCREENS
cached screens cost); then the GET load of one variant's screen with the Mutation's token
(wrk, 50 connections, after a 3 s warm-up), and the same with `If-None-Match` naming its ETag
(every answer a 304)."""

import base64
import hashlib
import http.client
import json
import math
import os
import struct
import subprocess
import time

import api
from common import BIN, REPO, die, kib_mib, le, log, met, num, proc_status, row, step, suffix, write_json

SCREENS = 100
BMP_BYTES = 48062
P99_TARGET_MS = 2
# What the cache may add per byte of screen: the bytes once, and the Secret's keeping.
RSS_PER_BYTE = 1.5


def bmp(seed):
    """A 1-bit 800x480 BMP: 62 bytes of headers and palette, 480 rows of 100 bytes."""
    pixels = bytes(((y // (seed % 7 + 2)) % 2) * 0xFF ^ (seed & 0xFF) for y in range(480) for _ in range(100))
    head = struct.pack("<2sIHHI", b"BM", 62 + len(pixels), 0, 0, 62)
    info = struct.pack("<IiiHHIIiiII", 40, 800, 480, 1, 1, 0, len(pixels), 2835, 2835, 2, 2)
    return head + info + b"\x00\x00\x00\x00\xff\xff\xff\x00" + pixels


def mutation(ns, image):
    return {
        "apiVersion": "neiam.org/v1", "kind": "Mutation",
        "metadata": {"name": "s", "namespace": ns},
        "spec": {
            "deployment": {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "s"},
                "spec": {"selector": {"matchLabels": {"app": "s"}},
                         "template": {"metadata": {"labels": {"app": "s"}},
                                      "spec": {"containers": [{"name": "snap", "image": image,
                                                               "ports": [{"name": "http", "containerPort": 80}]}]}}},
            },
            "variants": [{"label": f"v{i}", "instances": 0} for i in range(SCREENS)],
            "service": {"type": "ClusterIP", "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
            "screen": {"port": "http", "path": "/screen.bmp"},
        },
    }


def secrets(ns, uid):
    items = []
    for i in range(SCREENS):
        body = bmp(i)
        assert len(body) == BMP_BYTES
        items.append({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {
                "name": f"s-screen-v{i}", "namespace": ns,
                "labels": {"mutantops.neiam.org/owner": "s", "mutantops.neiam.org/kind": "mutation",
                           "app.kubernetes.io/managed-by": "mutantops", "mutantops.neiam.org/variant": f"v{i}"},
                "annotations": {"mutantops.neiam.org/screen-etag": '"' + hashlib.sha256(body).hexdigest() + '"',
                                "mutantops.neiam.org/screen-type": "image/bmp"},
                "ownerReferences": [{"apiVersion": "neiam.org/v1", "kind": "Mutation", "name": "s", "uid": uid,
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "data": {"screen": base64.b64encode(body).decode()},
        })
    return {"apiVersion": "v1", "kind": "List", "items": items}


def answer(b, path, token, etag):
    """One GET with If-None-Match: its status and the length of its body."""
    c = http.client.HTTPConnection("127.0.0.1", b.api_port, timeout=10)
    try:
        c.request("GET", path, headers={"Authorization": f"Bearer {token}", "If-None-Match": etag})
        r = c.getresponse()
        return r.status, len(r.read())
    finally:
        c.close()


def load(b, name, url, token, headers):
    """wrk against `url`; R[screen_<name>_rps], _p50, _p99."""
    extra = [a for h in headers for a in ("-H", h)]
    cmd = ["taskset", "-c", "1", "wrk", "-t1", "-c50", "--latency", "-H", f"Authorization: Bearer {token}", *extra]
    log(f"wrk (screen, {name}): GET {url} {' '.join(headers)}, 50 connections, 3 s warm-up + {b.WRK_SECONDS}s")
    subprocess.run([*cmd, "-d3s", url], check=True, stdout=subprocess.DEVNULL)
    out = b.path(f"wrk-screen-{name}.txt")
    with open(out, "w") as f:
        subprocess.run([*cmd, f"-d{b.WRK_SECONDS}s", url], check=True, stdout=f)
    res = api.parse_wrk(out)
    write_json(b.path(f"wrk-screen-{name}.json"), res)
    if res.get("non_2xx", 0) != 0:
        die(f"wrk (screen, {name}): answers of 4xx or 5xx; see {out}")
    b.R[f"screen_{name}_rps"] = str(math.floor(res["rps"]))
    b.R[f"screen_{name}_p50"], b.R[f"screen_{name}_p99"] = num(res["p50_ms"]), num(res["p99_ms"])


def measure(b):
    ns = f"bench-screens-{suffix()}"
    step(f"screens: {SCREENS} cached screens of {BMP_BYTES} B; the operator on CPU 0, the load on CPU 1")
    api.pin_control_plane(b, "1")
    try:
        measure_pinned(b, ns)
    finally:
        api.pin_control_plane(b, f"0-{os.cpu_count() - 1}")
        b.stop_operator()
    log(f"deleting namespace {ns} (and waiting for it to go)")
    b.delete_namespace(ns, 180)


def measure_pinned(b, ns):
    R = b.R
    b.create_namespace(ns)
    image = json.loads((REPO / "deploy/examples/deployment.json").read_text())
    image = image["spec"]["template"]["spec"]["containers"][0]["image"]
    b.start_operator("screens", ["taskset", "-c", "0"], BIN)
    doc = b.path("screens-mutation.json")
    write_json(doc, mutation(ns, image))
    b.kubectl("create", "-f", str(doc))
    uid = b.kubectl("-n", ns, "get", "mutation", "s", "-o", "jsonpath={.metadata.uid}",
                    stdout=subprocess.PIPE, text=True).stdout.strip()
    token = ""
    deadline = time.time() + 120
    while not token and time.time() < deadline:
        got = b.kubectl("-n", ns, "get", "secret", "s-secret", "-o", "jsonpath={.data.token}", check=False,
                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
        token = base64.b64decode(got).decode(errors="replace") if got else ""
        time.sleep(0.5)
    if len(token) != 64 or not uid:
        die("Mutation s has no uid or its Secret s-secret no 64-character token")
    base = f"http://127.0.0.1:{b.api_port}/api/v1/namespaces/{ns}/mutations/s/variants"
    time.sleep(5)
    before = proc_status(b.operator_pid())
    listed = b.path("screens-secrets.json")
    write_json(listed, secrets(ns, uid))
    b.kubectl("create", "-f", str(listed))
    deadline = time.time() + 120
    for i in range(SCREENS):
        while api.request("GET", f"{base}/v{i}/screen", token) != 200:
            if time.time() > deadline:
                die(f"the screen of v{i} was not served within 120 s of its Secret")
            time.sleep(0.2)
    time.sleep(10)
    after = proc_status(b.operator_pid())
    write_json(b.path("screens-memory.json"), {"before": before, "after": after})
    R["screen_rss_before"], R["screen_rss"] = str(before["VmRSS"]), str(after["VmRSS"])
    R["screen_hwm"] = str(after["VmHWM"])
    log(f"{SCREENS} screens cached: VmRSS {before['VmRSS']} -> {after['VmRSS']} KiB")
    etag = '"' + hashlib.sha256(bmp(0)).hexdigest() + '"'
    if answer(b, f"/api/v1/namespaces/{ns}/mutations/s/variants/v0/screen", token, etag) != (304, 0):
        die("GET of v0's screen with its ETag did not answer 304 with no body")
    load(b, "200", f"{base}/v0/screen", token, [])
    load(b, "304", f"{base}/v0/screen", token, [f"If-None-Match: {etag}"])


def rows(b):
    R = b.R
    if not R.get("screen_rss"):
        return
    added = (float(R["screen_rss"]) - float(R["screen_rss_before"])) * 1024
    bound = SCREENS * BMP_BYTES * RSS_PER_BYTE
    yield row(f"API GET screen ({BMP_BYTES} B, cached), Mutation token, 1 core, 50 conn: req/s",
              R["screen_200_rps"], "-", "-")
    yield row("API GET screen: p50 / p99", f"{R['screen_200_p50']} ms / {R['screen_200_p99']} ms",
              f"p99 ≤ {P99_TARGET_MS} ms", met(le(R["screen_200_p99"], P99_TARGET_MS)))
    yield row("API GET screen with its ETag (304), 1 core, 50 conn: req/s, p50 / p99",
              f"{R['screen_304_rps']}, {R['screen_304_p50']} ms / {R['screen_304_p99']} ms",
              f"p99 ≤ {P99_TARGET_MS} ms", met(le(R["screen_304_p99"], P99_TARGET_MS)))
    yield row(f"RSS with {SCREENS} cached screens of {BMP_BYTES} B (VmRSS; before them)",
              f"{kib_mib(R['screen_rss'])} ({kib_mib(R['screen_rss_before'])})",
              f"≤ {RSS_PER_BYTE} x their bytes added", met(added <= bound))
