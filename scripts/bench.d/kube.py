"""Watching the API server (standard library only): a client with the admin token of the bench
cluster's kubeconfig, informers (list, then watch) and a `Watch` that waits until counts over
the watched objects reach their targets: how convergence is timed."""

import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse


class Kube:
    """The API server at `server` (https URL), its CA certificate file and a bearer token."""

    def __init__(self, server, ca_file, token):
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port or 443
        self.token = token
        self.ctx = ssl.create_default_context(cafile=ca_file)

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
    """List, then watch, `path`; calls on_change(obj) / on_delete(obj) under `lock`, until
    stop()."""

    def __init__(self, kube, path, on_change, on_delete, lock, changed):
        super().__init__(daemon=True)
        self.kube, self.path = kube, path
        self.on_change, self.on_delete = on_change, on_delete
        self.lock, self.changed = lock, changed
        self.synced = threading.Event()
        self.error = None
        self.stopping = False
        self.conn = None

    def run(self):
        try:
            while not self.stopping:
                items, rv = self.kube.list(self.path)
                with self.lock:
                    for obj in items:
                        self.on_change(obj)
                self.synced.set()
                self.changed.set()
                while rv is not None and not self.stopping:
                    rv = self.watch(rv)
        except Exception as e:  # reported by the main thread
            if not self.stopping:
                self.error = e
        self.synced.set()
        self.changed.set()

    def stop(self):
        """Ends the watch: the thread exits (its socket shut, the read returns)."""
        self.stopping = True
        c = self.conn
        if c is not None and c.sock is not None:
            try:
                c.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def watch(self, rv):
        """Watch from rv; returns the rv to resume from, or None to relist (410 Gone)."""
        sep = "&" if "?" in self.path else "?"
        q = f"{self.path}{sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=600&resourceVersion={rv}"
        c = self.conn = self.kube.conn(timeout=700)
        try:
            c.request("GET", q, headers=self.kube.headers())
            r = c.getresponse()
            if r.status == 410:
                return None
            if r.status != 200:
                raise RuntimeError(f"watch {self.path}: {r.status} {r.read()[:300]!r}")
            while not self.stopping:
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
            return rv
        finally:
            c.close()


class Watch:
    """Informers over the paths in `sources` ({path: key of obj -> state}), each keeping a map
    of name -> state; `counts(maps)` turns the maps into the counts that `wait` compares with
    their targets."""

    def __init__(self, kube, sources, counts):
        self.lock, self.changed = threading.Lock(), threading.Event()
        self.maps = {path: {} for path in sources}
        self.counts = counts
        self.informers = [
            Informer(kube, path,
                     lambda o, m=self.maps[path], f=fn: m.__setitem__(o["metadata"]["name"], f(o)),
                     lambda o, m=self.maps[path]: m.pop(o["metadata"]["name"], None),
                     self.lock, self.changed)
            for path, fn in sources.items()]

    def start(self):
        """Starts the informers and returns once all have listed (then the objects may be
        created and the clock started)."""
        for inf in self.informers:
            inf.start()
        for inf in self.informers:
            inf.synced.wait()
        self.check()

    def check(self):
        for inf in self.informers:
            if inf.error:
                self.stop()
                raise RuntimeError(f"watching failed: {inf.error}")

    def wait(self, targets, deadline):
        """Until each count has reached its target, or `deadline` (epoch seconds): returns when
        each first reached it (epoch seconds, or None) and the last counts."""
        reached = dict.fromkeys(targets)
        try:
            while True:
                self.changed.wait(timeout=1)
                self.changed.clear()
                now = time.time()
                self.check()
                with self.lock:
                    last = self.counts(*self.maps.values())
                for key, want in targets.items():
                    if reached[key] is None and last[key] >= want:
                        reached[key] = now
                if all(t is not None for t in reached.values()) or now > deadline:
                    return reached, last
        finally:
            self.stop()

    def stop(self):
        for inf in self.informers:
            inf.stop()
