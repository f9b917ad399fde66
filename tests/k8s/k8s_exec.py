"""pods/exec over WebSocket (v5.channel.k8s.io, v4.channel.k8s.io), as kubectl 1.30+ speaks it.

The exec'd command runs inside the container's pid namespace on its node (k8s_kubelet.exec_argv),
so deleting the pod ends it too. One thread moves every byte with a select loop over the TLS
socket and the process's pipes, with bounded buffers both ways (backpressure: we stop reading a
side while the other side's buffer is full). One thread only, because an ssl socket must not be
read and written from two threads at once.

SPDY/3.1 (kubectl before 1.30, and kubectl's fallback) is not emulated: such a request gets
400 naming the reason.
"""

import json
import os
import select
import socket
import ssl
import subprocess
import threading
import time

import k8s_kubelet
import k8s_status
import k8s_websocket as ws
from k8s_status import ApiError

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
BUFFER_LIMIT = 1 << 20
READ_SIZE = 1 << 16
OUTPUT_DRAIN = 1.0


def exit_status(code):
    """The Status on the error channel from which kubectl takes its own exit code."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: exit status {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class ExecServer:
    def __init__(self, nodes):
        self.nodes = nodes

    def serve(self, http, pod, query):
        """Checks the request, upgrades the connection and runs the session."""
        upgrade = http.headers.get("Upgrade", "").lower()
        if upgrade != "websocket":
            raise k8s_status.bad_request(
                f"unable to upgrade connection: the emulated API server speaks only WebSocket "
                f"exec ({', '.join(PROTOCOLS)}), not {upgrade or 'a plain request'!r}; use kubectl 1.30 or newer")
        offered = [p.strip() for p in http.headers.get("Sec-WebSocket-Protocol", "").split(",")]
        protocol = next((p for p in PROTOCOLS if p in offered), None)
        if protocol is None:
            raise k8s_status.bad_request(f"unable to upgrade connection: none of the subprotocols "
                                         f"{offered} is supported ({', '.join(PROTOCOLS)})")
        command = [value for key, value in query if key == "command"]
        flags = {key: value in ("true", "1") for key, value in query if key in ("stdin", "stdout", "stderr", "tty")}
        container = dict(query).get("container") or pod["spec"]["containers"][0]["name"]
        if not command:
            raise k8s_status.bad_request("you must specify at least 1 command")
        process = self._container(pod, container)
        argv = k8s_kubelet.exec_argv(process, command)
        child = subprocess.Popen(argv, env=process.env, close_fds=True, start_new_session=True,
                                 stdin=subprocess.PIPE if flags.get("stdin") else subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        http.send_response(101, "Switching Protocols")
        http.send_header("Upgrade", "websocket")
        http.send_header("Connection", "Upgrade")
        http.send_header("Sec-WebSocket-Accept", ws.accept_key(http.headers.get("Sec-WebSocket-Key", "")))
        http.send_header("Sec-WebSocket-Protocol", protocol)
        http.end_headers()
        http.wfile.flush()
        http.close_connection = True
        try:
            Session(http.connection, child, protocol).run()
        finally:
            threading.Thread(target=child.wait, daemon=True).start()  # reap it whenever it ends

    def _container(self, pod, container):
        names = [c["name"] for c in pod["spec"]["containers"]]
        if container not in names:
            raise k8s_status.bad_request(f'container {container} is not valid for pod {pod["metadata"]["name"]}')
        with self.nodes.lock:
            processes = self.nodes.running.get(pod["metadata"]["uid"]) or {}
        process = processes.get(container)
        if process is None or process.wrapper.poll() is not None:
            raise k8s_status.bad_request(f'unable to upgrade connection: container not found ("{container}")')
        return process


class Session:
    """The select loop of one exec session."""

    def __init__(self, sock, child, protocol):
        self.sock, self.child, self.protocol = sock, child, protocol
        self.parser = ws.FrameParser()
        self.to_client = bytearray()
        self.to_stdin = bytearray()
        self.stdin_open = child.stdin is not None
        self.outputs = {child.stdout.fileno(): (1, child.stdout), child.stderr.fileno(): (2, child.stderr)}
        self.client_open = True
        self.finished = False
        self.exited_at = None
        for fd in list(self.outputs) + ([child.stdin.fileno()] if child.stdin else []):
            os.set_blocking(fd, False)
        sock.setblocking(False)

    def run(self):
        while not (self.finished and not self.to_client):
            self._finish_if_done()
            readable, writable = self._interest()
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()
            ready_r, ready_w, _ = select.select(readable, writable, [], 0 if pending else 0.1)
            if pending and self.sock not in ready_r and self.sock in readable:
                ready_r.append(self.sock)
            for fd in ready_r:
                if fd is self.sock:
                    self._read_client()
                else:
                    self._read_output(fd)
            for fd in ready_w:
                if fd is self.sock:
                    self._write_client()
                else:
                    self._write_stdin()
            if not self.client_open:
                break
        self._shutdown()

    def _interest(self):
        readable = [fd for fd in self.outputs if len(self.to_client) < BUFFER_LIMIT]
        writable = []
        if self.client_open and len(self.to_stdin) < BUFFER_LIMIT:
            readable.append(self.sock)
        if self.to_client and self.client_open:
            writable.append(self.sock)
        if self.to_stdin and self.stdin_open:
            writable.append(self.child.stdin.fileno())
        return readable, writable

    def _read_client(self):
        try:
            data = self.sock.recv(READ_SIZE)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            return
        except OSError:
            data = b""
        if not data:
            self.client_open = False
            return
        try:
            messages = self.parser.feed(data)
        except ws.ProtocolError:
            self.client_open = False
            return
        for opcode, payload in messages:
            self._on_message(opcode, payload)

    def _on_message(self, opcode, payload):
        if opcode == ws.OP_PING:
            self.to_client += ws.frame(ws.OP_PONG, payload)
        elif opcode == ws.OP_CLOSE:
            self._close_stdin()
            if not self.finished:
                self.client_open = False
        elif opcode in (ws.OP_BINARY, ws.OP_TEXT) and payload:
            channel, data = payload[0], payload[1:]
            if channel == 0 and self.stdin_open:
                self.to_stdin += data
            elif channel == 255 and data[:1] == b"\x00":
                self.stdin_eof = True  # v5 close-stream: EOF once what came before is written
                if not self.to_stdin:
                    self._close_stdin()

    def _write_stdin(self):
        try:
            written = os.write(self.child.stdin.fileno(), self.to_stdin[:READ_SIZE])
            del self.to_stdin[:written]
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin or ended: drop the rest
            self.to_stdin.clear()
            self._close_stdin()
            return
        if not self.to_stdin and getattr(self, "stdin_eof", False):
            self._close_stdin()

    def _close_stdin(self):
        if self.stdin_open:
            self.stdin_open = False
            try:
                self.child.stdin.close()
            except OSError:
                pass

    def _read_output(self, fd):
        channel, pipe = self.outputs[fd]
        try:
            data = os.read(fd, READ_SIZE)
        except BlockingIOError:
            return
        if not data:
            del self.outputs[fd]
            pipe.close()
            return
        self.to_client += ws.frame(ws.OP_BINARY, bytes([channel]) + data)

    def _write_client(self):
        try:
            sent = self.sock.send(self.to_client[:READ_SIZE])
            del self.to_client[:sent]
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
            pass
        except OSError:
            self.client_open = False

    def _finish_if_done(self):
        """Once the command has ended and stdout and stderr are at EOF (or, when a process it
        left in the background holds them open, OUTPUT_DRAIN seconds later): the exit Status on
        channel 3, then a close frame."""
        if self.finished:
            return
        code = self.child.poll()
        if code is None:
            return
        if self.exited_at is None:
            self.exited_at = time.monotonic()
        if self.outputs and time.monotonic() - self.exited_at < OUTPUT_DRAIN:
            return
        for fd in list(self.outputs):
            self.outputs.pop(fd)[1].close()
        code = 128 - code if code < 0 else code
        self.to_client += ws.frame(ws.OP_BINARY, b"\x03" + json.dumps(exit_status(code)).encode())
        self.to_client += ws.close_frame()
        self.finished = True

    def _shutdown(self):
        # A client that left early leaves the command running, as a real kubelet does: it sees
        # EOF on stdin and EPIPE when it writes.
        self._close_stdin()
        for _, pipe in self.outputs.values():
            pipe.close()
        try:
            self.sock.setblocking(True)
            self.sock.settimeout(2)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
