"""pods/exec (placeholder while the WebSocket side is written)."""
import k8s_status
from k8s_status import ApiError


class ExecServer:
    def __init__(self, nodes):
        self.nodes = nodes

    def serve(self, http, pod, query):
        raise ApiError(k8s_status.status(400, "BadRequest", "exec not implemented yet"))
