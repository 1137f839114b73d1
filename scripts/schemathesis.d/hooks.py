"""Schemathesis hooks of scripts/schemathesis (SCHEMATHESIS_HOOKS), for every run.

Enrollments: the document's example of `POST .../devices` enrolls device `lobby-board-1` with a
variant `lobby-1`, and Schemathesis builds many of its bodies from that example; after the
first, all would be refused as taken (409) before the rest of the body is looked at. So each
run gives every such body an id and a label of its own (`<run>-<n>`, `<run>-v<n>`), and the
bodies reach the operation.

The device run (`MUTANTOPS_ENROLLED` set): the requests go out with a device's own token, as a
device sends them. The devices are those the script enrolled into Mutation seed before the
runs (`enrolled.jsonl` in the report directory), used one after another: the run starts with
the first, and when a request removes the device in use (DELETE .../devices/<its id>: 204) it
goes on with the next. A new token (POST .../devices/<its id>/token: 200) replaces the one in
use. So a run that removes its device or rotates its token keeps testing with a token that
works, and the replay (replay.py) follows every switch from the recorded answers alone. Path
parameters `id` and `label` of value `self` (the run's dictionaries give it) become the id and
the variant of the device in use, so the run reaches its own record and variant often.
"""

import itertools
import json
import os

import schemathesis

RUN = os.environ.get("MUTANTOPS_RUN", "run")
EXAMPLE_ID, EXAMPLE_LABEL = "lobby-board-1", "lobby-1"
fresh = itertools.count(1)

DEVICES = []
if os.environ.get("MUTANTOPS_ENROLLED"):
    with open(os.environ["MUTANTOPS_ENROLLED"]) as f:
        for line in f:
            if line.strip() and json.loads(line)["name"] == "seed":
                answer = json.loads(line)["answer"]
                DEVICES.append({"id": answer["id"], "token": answer["token"], "variant": answer["variant"]})
    if not DEVICES:
        raise RuntimeError("MUTANTOPS_ENROLLED lists no device of seed")
SWITCHES = os.environ.get("MUTANTOPS_DEVICE_LOG")
in_use = 0


def device():
    return DEVICES[min(in_use, len(DEVICES) - 1)]


def note(what):
    if SWITCHES:
        with open(SWITCHES, "a") as f:
            f.write(json.dumps(what) + "\n")


@schemathesis.hook
def before_call(context, case, kwargs):
    body = case.body
    if case.operation.path.endswith("/devices") and case.method.upper() == "POST" and isinstance(body, dict):
        n = next(fresh)
        if body.get("id") == EXAMPLE_ID:
            body["id"] = f"{RUN}-{n}"
        variant = body.get("variant")
        if isinstance(variant, dict) and variant.get("label") == EXAMPLE_LABEL:
            variant["label"] = f"{RUN}-v{n}"
    if not DEVICES:
        return
    d = device()
    params = case.path_parameters
    if isinstance(params, dict):
        if params.get("id") == "self":
            params["id"] = d["id"]
        if params.get("label") == "self":
            params["label"] = d["variant"]
    headers = dict(case.headers or {})
    for name in [n for n in headers if n.lower() == "authorization"]:
        del headers[name]
    headers["Authorization"] = f"Bearer {d['token']}"
    case.headers = headers


@schemathesis.hook
def after_call(context, case, response):
    global in_use
    if not DEVICES:
        return
    d = device()
    path = case.operation.path
    own = isinstance(case.path_parameters, dict) and case.path_parameters.get("id") == d["id"]
    if not own or not path.startswith("/api/v1/namespaces/{ns}/mutations/{name}/devices/{id}"):
        return
    if case.method.upper() == "DELETE" and response.status_code == 204:
        in_use += 1
        note({"removed": d["id"], "next": device()["id"] if in_use < len(DEVICES) else None})
    elif path.endswith("/token") and response.status_code == 200:
        try:
            d["token"] = json.loads(response.content)["token"]
        except (ValueError, KeyError, TypeError):
            return
        note({"rotated": d["id"]})
