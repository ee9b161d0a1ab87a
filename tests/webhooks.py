"""A webhook receiver for the alert tests: a real HTTP server on 127.0.0.1 and a free port
(the ``receiver`` fixture of conftest.py makes them and closes them after the test)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Receiver:
    """A webhook on 127.0.0.1 and a free port that records every POST and answers each with the
    next of ``answers`` (a status, "close" to hang up without one, "hang" to answer only when
    released), then 200."""

    def __init__(self, answers=()):
        self.answers = list(answers)
        self.requests: list[tuple[dict, bytes]] = []
        self.hanging = 0
        self.released = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver._lock:
                    receiver.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
                    answer = receiver.answers.pop(0) if receiver.answers else 200
                if answer == "close":
                    self.close_connection = True
                    return
                if answer == "hang":
                    with receiver._lock:
                        receiver.hanging += 1
                    receiver.released.wait(60)
                    answer = 200
                self.send_response(answer)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self, event: str | None = None) -> list[tuple[dict, dict]]:
        """(headers, parsed body) of every POST received, of one event or all."""
        with self._lock:
            received = [(h, json.loads(b)) for h, b in self.requests]
        return [(h, b) for h, b in received if event is None or b["event"] == event]

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(10)
