"""A TCP proxy that cuts its connections at random moments (client reconnect tests)."""

from __future__ import annotations

import random
import socket
import threading


class CuttingProxy:
    """Forwards ``127.0.0.1:port`` to ``target``; ``cut()`` drops every open connection.

    With ``start_cutting(low, high, limit)`` a background thread cuts all connections
    after a random pause in ``[low, high]`` seconds, ``limit`` times at most.
    """

    def __init__(self, target_host: str, target_port: int, *, seed: int | None = None) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._cutting = threading.Event()
        self._random = random.Random(seed)
        self.cuts = 0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, upstream))
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> int:
        """Drop every open connection now; returns how many were cut."""
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
        if pairs:
            self.cuts += 1
        return len(pairs)

    def start_cutting(self, low: float, high: float, limit: int) -> None:
        self._cutting.set()

        def run() -> None:
            done = 0
            while done < limit and self._cutting.is_set() and not self._stop.is_set():
                if self._stop.wait(self._random.uniform(low, high)):
                    return
                if self._cutting.is_set() and self.cut():
                    done += 1

        threading.Thread(target=run, daemon=True).start()

    def stop_cutting(self) -> None:
        self._cutting.clear()

    def close(self) -> None:
        self._stop.set()
        self._cutting.clear()
        self._listener.close()
        self.cut()
