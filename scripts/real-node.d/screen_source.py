"""The picture behind the stand-in renderer of scripts/real-node's screens step (R53): the
renderer's /cgi-bin/screen fetches GET /screen from here, on this machine, which the real node
is. Each request appends one line ("<unix time>") to DIR/fetches, so the step counts the fetches
that reached the renderer; the answer is DIR/screen as image/bmp, or 500 while DIR/fail exists.

  screen_source.py DIR PORT
"""

import http.server
import os
import sys
import time

DIR = sys.argv[1] if len(sys.argv) == 3 else sys.exit(__doc__)


class Source(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the name http.server calls)
        with open(os.path.join(DIR, "fetches"), "a", encoding="utf-8") as f:
            f.write(f"{time.time():.3f}\n")
        if self.path != "/screen" or os.path.exists(os.path.join(DIR, "fail")):
            self.send_error(500, "no screen")
            return
        with open(os.path.join(DIR, "screen"), "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Type", "image/bmp")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[2])), Source).serve_forever()
