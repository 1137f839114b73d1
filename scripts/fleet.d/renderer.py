"""The fleet's stand-in renderer (scripts/fleet --screens): an HTTP server on this host's own
address (the operator never asks a loopback endpoint) that answers every GET with a 1-bit
800x480 BMP (48,062 bytes, what an e-paper board shows), whose picture changes once per
`changes_every` real seconds and is the same bytes in between, as a dashboard that is
re-rendered at every refresh but shows something new only a few times a day. Each variant's
Service is pointed at it by an EndpointSlice of the fleet's own, as the screens tests do."""

import http.server
import json
import socket
import threading
import time

# The HTTP API bench's picture (scripts/bench.d, on the driver's path): one BMP per seed.
from screens import bmp


def own_address():
    """This host's address on its default route: no packet is sent to find it."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


class Renderer:
    """The running renderer: its address, port, and the pictures it answered."""

    def __init__(self, changes_every):
        self.changes_every = changes_every
        self.started = time.monotonic()
        self.answered = 0
        self.cache = {}
        self.ip = own_address()
        renderer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (the standard library's name)
                body = renderer.picture()
                self.send_response(200)
                self.send_header("Content-Type", "image/bmp")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_):
                pass

        self.server = http.server.ThreadingHTTPServer((self.ip, 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def picture(self):
        version = int((time.monotonic() - self.started) / self.changes_every)
        self.answered += 1
        if version not in self.cache:
            self.cache = {version: bmp(version)}
        return self.cache[version]

    def point(self, b, ns, service):
        """An EndpointSlice naming the renderer as Service `service`'s one ready endpoint."""
        slice_ = {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": f"{service}-renderer", "namespace": ns,
                         "labels": {"kubernetes.io/service-name": service,
                                    "endpointslice.kubernetes.io/managed-by": "mutantops-fleet"}},
            "addressType": "IPv4",
            "endpoints": [{"addresses": [self.ip], "conditions": {"ready": True}}],
            "ports": [{"name": "http", "port": self.port, "protocol": "TCP"}],
        }
        b.kubectl("apply", "-f", "-", input=json.dumps(slice_), text=True)
