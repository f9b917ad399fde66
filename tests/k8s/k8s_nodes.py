"""The node emulator: Node objects for the testcluster hosts, their liveness, the scheduler,
and one "kubelet" thread per pod that runs its containers and reports their status.

Liveness: a node is alive while its host's sshd (pid in hosts/<name>/sshd.pid) runs; after
`testcluster.sh kill H` it is unreachable within LIVENESS_PERIOD (Ready Unknown, taint
node.kubernetes.io/unreachable). `testcluster.sh kube-node H notready` writes
kube/nodes/<name>.notready: Ready False, taint node.kubernetes.io/not-ready. Pods on a node that
is not Ready get Ready=False and are evicted (deleted, with their grace) once their toleration
for the taint's key has passed (tolerationSeconds; 300 s by default). A pod whose node is dead
stays Terminating until the node comes back, as with a real kubelet that cannot confirm.
"""

import os
import threading
import time

from k8s_pods import PodLifecycle
from k8s_store import now_rfc3339

LIVENESS_PERIOD = 0.5
UNREACHABLE = "node.kubernetes.io/unreachable"
NOT_READY = "node.kubernetes.io/not-ready"


def gpus_of(pod):
    total = 0
    for container in pod["spec"]["containers"]:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get("nvidia.com/gpu") or \
            (resources.get("requests") or {}).get("nvidia.com/gpu") or 0
        try:
            total += int(value)
        except (TypeError, ValueError):
            pass
    return total


def set_condition(conditions, kind, status, reason=None, message=None):
    """Sets condition `kind` in a conditions list; returns True if it changed."""
    for condition in conditions:
        if condition["type"] == kind:
            if condition["status"] == status and condition.get("reason") == reason:
                return False
            condition.update(status=status, lastTransitionTime=now_rfc3339())
            condition.pop("reason", None)
            condition.pop("message", None)
            break
    else:
        condition = {"type": kind, "status": status, "lastProbeTime": None,
                     "lastTransitionTime": now_rfc3339()}
        conditions.append(condition)
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return True


class Host:
    def __init__(self, name, ip, host_dir, gpus):
        self.name, self.ip, self.dir, self.gpus = name, ip, host_dir, gpus
        self.state = "Ready"          # Ready | NotReady (forced) | Unreachable (sshd gone)
        self.not_ready_since = None   # monotonic time the node stopped being Ready

    def sshd_pid(self):
        """The host's sshd pid if it is running, else None."""
        try:
            with open(os.path.join(self.dir, "sshd.pid")) as handle:
                pid = int(handle.read().strip())
            with open(f"/proc/{pid}/stat") as handle:
                stat = handle.read()
            # "PID (comm) STATE ...": a killed sshd may stay a zombie for a while (its parent
            # is whatever init reaps orphans here): dead all the same.
            name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2]
            return pid if name == "sshd" and state not in "ZX" else None
        except (OSError, ValueError):
            return None


class NodeEmulator(PodLifecycle):
    def __init__(self, store, hosts, state_dir):
        self.store = store
        self.hosts = {host.name: host for host in hosts}
        self.state_dir = state_dir
        self.log_dir = os.path.join(state_dir, "logs")
        os.makedirs(self.log_dir, exist_ok=True)
        self.lock = threading.Lock()
        self.running = {}  # pod uid -> {container name: ContainerProcess}
        self.kubelets = {}  # pod uid -> thread
        self.stopping = threading.Event()
        for host in hosts:
            store.create("nodes", "", self._node_object(host))
        self.start_pod_worker()

    # ---- nodes ------------------------------------------------------------------------------

    def _node_object(self, host):
        gpus = str(host.gpus)
        return {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": host.name, "labels": {
                    "kubernetes.io/hostname": host.name, "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64"}},
                "spec": {},
                "status": {
                    "capacity": {"cpu": str(os.cpu_count()), "nvidia.com/gpu": gpus, "pods": "110"},
                    "allocatable": {"cpu": str(os.cpu_count()), "nvidia.com/gpu": gpus, "pods": "110"},
                    "addresses": [{"type": "InternalIP", "address": host.ip},
                                  {"type": "Hostname", "address": host.name}],
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                    "message": "kubelet is posting ready status",
                                    "lastHeartbeatTime": now_rfc3339(),
                                    "lastTransitionTime": now_rfc3339()}],
                    "nodeInfo": {"kubeletVersion": "v1.32.0-dtrain-emulator", "osImage": "testcluster host",
                                 "containerRuntimeVersion": "emulator://1", "architecture": "amd64",
                                 "operatingSystem": "linux"}}}

    def _observed_state(self, host):
        if host.sshd_pid() is None:
            return "Unreachable"
        if os.path.exists(os.path.join(self.state_dir, "nodes", f"{host.name}.notready")):
            return "NotReady"
        return "Ready"

    def _publish_node(self, host):
        status, reason, message, taint = {
            "Ready": ("True", "KubeletReady", "kubelet is posting ready status", None),
            "NotReady": ("False", "KubeletNotReady", "node forced NotReady (testcluster.sh kube-node)", NOT_READY),
            "Unreachable": ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.", UNREACHABLE),
        }[host.state]

        def mutate(node):
            set_condition(node["status"]["conditions"], "Ready", status, reason, message)
            node["spec"]["taints"] = [] if taint is None else [
                {"key": taint, "effect": "NoExecute", "timeAdded": now_rfc3339()},
                {"key": taint, "effect": "NoSchedule", "timeAdded": now_rfc3339()}]
            if not node["spec"]["taints"]:
                del node["spec"]["taints"]
        self.store.update("nodes", "", host.name, mutate)

    def check_nodes(self):
        for host in self.hosts.values():
            observed = self._observed_state(host)
            if observed == host.state:
                continue
            was_lost = host.state == "Unreachable"
            host.state = observed
            host.not_ready_since = None if observed == "Ready" else time.monotonic()
            self._publish_node(host)
            if was_lost:
                self._node_back(host)
            self._mark_pods_ready(host)

    def _node_back(self, host):
        """The host's sshd runs again: its kubelet finds its pods' processes gone (they died
        with the host). Terminating pods are removed; the others end Failed."""
        pods, _ = self.store.list("pods", predicate=lambda p: p["spec"].get("nodeName") == host.name)
        for pod in pods:
            uid = pod["metadata"]["uid"]
            with self.lock:
                kubelet = self.kubelets.get(uid)
            if kubelet is None or kubelet.is_alive():
                continue
            if not self._finish_if_deleting(pod) and pod["status"].get("phase") == "Running":
                self._update(pod, lambda p: p["status"].update(phase="Failed", reason="NodeLost",
                                                               message=f"node {host.name} was lost"))

    def _mark_pods_ready(self, host):
        pods, _ = self.store.list("pods", predicate=lambda p: p["spec"].get("nodeName") == host.name)
        ready = "True" if host.state == "Ready" else "False"
        for pod in pods:
            if pod["status"].get("phase") != "Running":
                continue
            self.store.update("pods", pod["metadata"]["namespace"], pod["metadata"]["name"],
                              lambda p: set_condition(p["status"].setdefault("conditions", []), "Ready", ready))

    def _evict_expired(self):
        """Deletes pods whose toleration of their node's taint has run out."""
        for host in self.hosts.values():
            if host.state == "Ready":
                continue
            taint = UNREACHABLE if host.state == "Unreachable" else NOT_READY
            waited = time.monotonic() - host.not_ready_since
            pods, _ = self.store.list("pods", predicate=lambda p: p["spec"].get("nodeName") == host.name
                                      and not p["metadata"].get("deletionTimestamp"))
            for pod in pods:
                if waited >= self._toleration_seconds(pod, taint):
                    self.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], None,
                                    reason="evicted: node " + host.state)

    @staticmethod
    def _toleration_seconds(pod, taint):
        best = None
        for toleration in pod["spec"].get("tolerations") or []:
            if toleration.get("effect") not in (None, "", "NoExecute"):
                continue
            if toleration.get("operator") == "Exists" and not toleration.get("key"):
                pass
            elif toleration.get("key") != taint:
                continue
            seconds = toleration.get("tolerationSeconds")
            seconds = float("inf") if seconds is None else max(0, seconds)
            best = seconds if best is None else max(best, seconds)
        return 0 if best is None else best

    def run_forever(self):
        """The liveness loop: node states, pending pods, evictions."""
        while not self.stopping.wait(LIVENESS_PERIOD):
            try:
                self.check_nodes()
                self.schedule_pending()
                self._evict_expired()
            except Exception as error:  # keep the loop alive; the log says why
                print(f"apiserver: node loop: {error!r}", flush=True)
