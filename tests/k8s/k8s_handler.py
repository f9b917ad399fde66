"""The HTTP side of the API server: routing, authentication, authorization, the request log,
and the REST verbs (get, list, watch, create, update, patch, delete) over the store.

A handler thread per connection (HTTP/1.1 keep-alive). Whatever goes wrong in one request is
answered with a metav1.Status (400 for input we cannot read, 500 naming an internal bug) and
never ends the server.
"""

import json
import time
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler

import k8s_auth
import k8s_discovery
import k8s_proto
import k8s_status
from k8s_status import ApiError

READ_LIMIT = 16 << 20  # the largest request body accepted (a real server takes 3 MiB)


class Request:
    """What a URL names: a resource (or a discovery document) and the verb on it."""

    def __init__(self):
        self.discovery = None      # a callable giving the document, for discovery paths
        self.resource = None       # k8s_discovery.Resource
        self.namespace = ""
        self.name = ""
        self.subresource = ""
        self.verb = ""


def parse_path(path, method, query):
    parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
    request = Request()
    simple = {("version",): lambda: k8s_discovery.SERVER_VERSION,
              ("api",): k8s_discovery.api_versions, ("apis",): k8s_discovery.api_group_list,
              ("healthz",): None, ("livez",): None, ("readyz",): None}
    if tuple(parts) in simple:
        request.discovery = simple[tuple(parts)] or (lambda: "ok")
        request.verb = "get"
        return request
    if parts[:2] == ["openapi", "v3"]:
        rest = "/".join(parts[2:])
        request.discovery = (k8s_discovery.openapi_v3_root if not rest
                             else lambda: k8s_discovery.openapi_v3_document(rest))
        request.verb = "get"
        return request
    if parts[:1] == ["openapi"]:
        request.discovery = lambda: None  # 404: v2 is not served (v3 is enough for kubectl)
        return request
    if parts[:1] == ["api"]:
        group, version, rest = "", parts[1] if len(parts) > 1 else "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 2:
        group, version, rest = parts[1], parts[2] if len(parts) > 2 else "", parts[3:]
        if not version:
            request.discovery = lambda: k8s_discovery.api_group(group)
            request.verb = "get"
            return request
    else:
        return request
    if not rest:
        request.discovery = lambda: k8s_discovery.api_resource_list(group, version)
        request.verb = "get"
        return request
    if rest[0] == "namespaces" and len(rest) >= 3:
        request.namespace, rest = rest[1], rest[2:]
    request.resource = k8s_discovery.find_resource(group, version, rest[0])
    request.name = rest[1] if len(rest) > 1 else ""
    request.subresource = rest[2] if len(rest) > 2 else ""
    if len(rest) > 3 or request.resource is None:
        request.resource = None
        return request
    request.verb = _verb(method, request, query)
    return request


def _verb(method, request, query):
    if request.subresource == "exec":
        return "create"  # a WebSocket exec is a GET, authorized as create (as kube-apiserver 1.31+)
    if method == "GET":
        if not request.name:
            return "watch" if query.get("watch") in ("true", "1") else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if request.name else "deletecollection"}.get(method, method.lower())


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "dtrain-kube-emulator/1"
    # Set by the server: .api (the Api of k8s_api.py), .tokens, .log (RequestLog), .tls (SSLContext)

    def setup(self):
        # TLS handshake here, in the connection's own thread, not in the accept loop.
        self.request.settimeout(10)
        self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        self.request.settimeout(None)
        super().setup()

    def log_message(self, *args):
        pass  # every request is in requests.jsonl instead

    def send_response(self, code, message=None):
        super().send_response(code, message)
        self.server.log.record(self, code)

    def do_GET(self):
        self._dispatch("GET")

    def do_POST(self):
        self._dispatch("POST")

    def do_PUT(self):
        self._dispatch("PUT")

    def do_PATCH(self):
        self._dispatch("PATCH")

    def do_DELETE(self):
        self._dispatch("DELETE")

    # ---- plumbing ---------------------------------------------------------------------------

    def _dispatch(self, method):
        self.user, self.verb = "", ""
        url = urllib.parse.urlsplit(self.path)
        self.url_path = url.path
        self.query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        self.query_list = urllib.parse.parse_qsl(url.query, keep_blank_values=True)
        try:
            self.user = self._authenticate()
            request = parse_path(url.path, method, self.query)
            self.verb = request.verb
            if request.discovery is not None:
                return self._discovery(request)
            if request.resource is None:
                raise ApiError(k8s_status.status(404, "NotFound", "the server could not find the requested resource"))
            self._authorize(request)
            self.server.api.handle(self, method, request)
        except ApiError as error:
            self.send_json(error.status["code"], error.status)
        except (BrokenPipeError, ConnectionResetError, TimeoutError, OSError) as error:
            self.close_connection = True
            if not isinstance(error, (BrokenPipeError, ConnectionResetError)):
                print(f"apiserver: {method} {self.path}: {error!r}", flush=True)
        except Exception:
            print(f"apiserver: internal bug on {method} {self.path}:\n{traceback.format_exc()}", flush=True)
            try:
                self.send_json(500, k8s_status.status(500, "InternalError",
                                                      "internal bug in the emulated API server; see its log"))
            except OSError:
                self.close_connection = True

    def _authenticate(self):
        header = self.headers.get("Authorization", "")
        if header.startswith("Bearer "):
            user = self.server.tokens.get(header[len("Bearer "):].strip())
            if user:
                return user
        raise k8s_status.unauthorized()

    def _authorize(self, request):
        resource = request.resource.plural
        if request.subresource:
            resource += "/" + request.subresource
        if not k8s_auth.allowed(self.user, request.verb, request.resource.group, resource):
            raise k8s_status.forbidden(self.user, request.verb, request.resource.plural, request.subresource,
                                       request.name, request.namespace, request.resource.group)

    def _discovery(self, request):
        document = request.discovery()
        if document is None:
            raise ApiError(k8s_status.status(404, "NotFound", "the server could not find the requested resource"))
        if isinstance(document, str):
            return self.send_text(200, document)
        self.send_json(200, document)

    def read_body(self):
        """The request body, whether sent with Content-Length or chunked (Go's client sends
        bodies of unknown length chunked)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts, total = [], 0
            while True:
                line = self.rfile.readline(1024)
                try:
                    size = int(line.split(b";")[0].strip(), 16)
                except ValueError:
                    raise k8s_status.bad_request("malformed chunked request body")
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                total += size
                if total > READ_LIMIT:
                    raise ApiError(k8s_status.status(413, "RequestEntityTooLarge", "Request entity too large"))
                parts.append(self.rfile.read(size))
                self.rfile.readline(16)
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            raise k8s_status.bad_request("malformed Content-Length")
        if length > READ_LIMIT:
            raise ApiError(k8s_status.status(413, "RequestEntityTooLarge", "Request entity too large"))
        return self.rfile.read(length) if length > 0 else b""

    def read_json(self):
        raw = self.read_body()
        if not raw:
            return None
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type == "application/vnd.kubernetes.protobuf":
            try:
                return k8s_proto.decode(raw)
            except k8s_proto.ProtoError as error:
                raise k8s_status.unsupported_media_type(f"{content_type}: {error}")
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as error:
            raise k8s_status.bad_request(f"the body of the request could not be decoded as JSON: {error}")

    def send_json(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self.wfile.write(data)

    def send_text(self, code, text):
        data = text.encode()
        self.send_response(code)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def start_chunked(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()

    def write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()


class RequestLog:
    """requests.jsonl: one line per request (time, user, verb, method, path, query, code).
    The Authorization header is never written."""

    def __init__(self, path):
        import threading
        self.lock = threading.Lock()
        self.file = open(path, "a", buffering=1)

    def record(self, handler, code):
        line = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03d}Z",
                "user": getattr(handler, "user", ""), "verb": getattr(handler, "verb", ""),
                "method": handler.command, "path": getattr(handler, "url_path", handler.path),
                "query": getattr(handler, "query_list", []), "code": code,
                "userAgent": handler.headers.get("User-Agent", "") if handler.headers else ""}
        with self.lock:
            self.file.write(json.dumps(line) + "\n")
