"""Pod lifecycle on the emulated nodes: scheduling, running containers, status, deletion.

The NodeEmulator (k8s_nodes.py) inherits this: it owns the hosts and the liveness loop; this
part owns what a scheduler and a kubelet do for each pod. Every status change goes through the
store, so watchers see it as a MODIFIED event.
"""

import datetime
import queue
import threading
import time

import k8s_kubelet
from k8s_store import now_rfc3339, NotFound

RESTART_BACKOFF = 1.0
# How long after a container died we look at its node: `testcluster.sh kill H` SIGKILLs the
# host's sshd and its pods at once, and a pod killed with its node is lost, not Failed.
NODE_CHECK_DELAY = 0.3


def _key(pod):
    return pod["metadata"].get("namespace", ""), pod["metadata"]["name"]


class PodLifecycle:
    def start_pod_worker(self):
        self.pod_queue = queue.Queue()
        self.store.listeners.append(self._on_store_event)
        threading.Thread(target=self._pod_worker, name="pod-worker", daemon=True).start()

    def _on_store_event(self, resource, event_type, obj):
        # Runs under the store lock: only queue the work.
        if resource == "pods" and event_type == "ADDED":
            self.pod_queue.put(_key(obj))

    def _pod_worker(self):
        while True:
            namespace, name = self.pod_queue.get()
            try:
                self._admit(namespace, name)
            except Exception as error:
                print(f"apiserver: pod {namespace}/{name}: {error!r}", flush=True)

    def _admit(self, namespace, name):
        try:
            pod = self.store.get("pods", namespace, name)
        except NotFound:
            return
        if not pod["spec"].get("nodeName"):
            self._schedule(pod)
        else:
            self._start_kubelet(pod)

    # ---- scheduler --------------------------------------------------------------------------

    def schedule_pending(self):
        pods, _ = self.store.list("pods", predicate=lambda p: not p["spec"].get("nodeName")
                                  and not p["metadata"].get("deletionTimestamp"))
        for pod in pods:
            self._schedule(pod)

    def _gpus_in_use(self):
        from k8s_nodes import gpus_of
        used = {name: [0, 0] for name in self.hosts}
        pods, _ = self.store.list("pods", predicate=lambda p: p["spec"].get("nodeName") in used
                                  and p["status"].get("phase") not in ("Succeeded", "Failed"))
        for pod in pods:
            entry = used[pod["spec"]["nodeName"]]
            entry[0] += gpus_of(pod)
            entry[1] += 1
        return used

    def _schedule(self, pod):
        from k8s_nodes import gpus_of, set_condition
        with self.lock:
            need = gpus_of(pod)
            selector = pod["spec"].get("nodeSelector") or {}
            used = self._gpus_in_use()
            candidates = []
            for host in self.hosts.values():
                labels = {"kubernetes.io/hostname": host.name, "kubernetes.io/os": "linux"}
                if host.state != "Ready" or any(labels.get(k) != v for k, v in selector.items()):
                    continue
                if host.gpus - used[host.name][0] < need:
                    continue
                candidates.append((used[host.name][0], used[host.name][1], host.name))
            namespace, name = _key(pod)
            if not candidates:
                message = (f"0/{len(self.hosts)} nodes are available: no Ready node matches the "
                           f"node selector with {need} free nvidia.com/gpu")
                self.store.update("pods", namespace, name, lambda p: set_condition(
                    p["status"].setdefault("conditions", []), "PodScheduled", "False",
                    "Unschedulable", message) or False)
                return
            node = min(candidates)[2]

            def bind(p):
                if p["spec"].get("nodeName"):
                    return False
                p["spec"]["nodeName"] = node
                set_condition(p["status"].setdefault("conditions", []), "PodScheduled", "True")
            bound = self.store.update("pods", namespace, name, bind)
        if bound is not None and bound["spec"].get("nodeName") == node:
            self._start_kubelet(bound)

    # ---- kubelet ----------------------------------------------------------------------------

    def _start_kubelet(self, pod):
        uid = pod["metadata"]["uid"]
        with self.lock:
            if uid in self.kubelets or pod["spec"]["nodeName"] not in self.hosts:
                return
            thread = threading.Thread(target=self._run_pod, args=(pod,), daemon=True,
                                      name=f"kubelet-{pod['metadata']['name']}")
            self.kubelets[uid] = thread
        thread.start()

    def _update(self, pod, mutate):
        namespace, name = _key(pod)
        return self.store.update("pods", namespace, name, mutate)

    def _run_pod(self, pod):
        from k8s_nodes import set_condition
        host = self.hosts[pod["spec"]["nodeName"]]
        while host.state != "Ready" and not self.stopping.is_set():
            time.sleep(0.2)  # a pod bound to a node that is down waits for it
        if self._finish_if_deleting(pod):
            return
        uid = pod["metadata"]["uid"]
        processes = {}
        try:
            for container in pod["spec"]["containers"]:
                processes[container["name"]] = k8s_kubelet.start_container(
                    host.sshd_pid(), pod, container, host.ip, self.log_dir)
        except (OSError, TypeError) as error:
            for process in processes.values():
                k8s_kubelet.kill_container(process, 0)
            self._update(pod, lambda p: p["status"].update(phase="Failed", reason="StartError",
                                                           message=str(error)))
            self._finish_if_deleting(pod)
            return
        with self.lock:
            self.running[uid] = processes

        def running(p):
            status = p["status"]
            status.update(phase="Running", podIP=host.ip, podIPs=[{"ip": host.ip}], hostIP=host.ip,
                          hostIPs=[{"ip": host.ip}], startTime=now_rfc3339())
            conditions = status.setdefault("conditions", [])
            for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready"):
                set_condition(conditions, kind, "True" if host.state == "Ready" or kind != "Ready" else "False")
            status["containerStatuses"] = [self._running_status(c, processes[c["name"]], 0)
                                           for c in p["spec"]["containers"]]
        self._update(pod, running)
        waiters = [threading.Thread(target=self._watch_container, args=(pod, host, c, processes), daemon=True)
                   for c in pod["spec"]["containers"]]
        for waiter in waiters:
            waiter.start()
        for waiter in waiters:
            waiter.join()
        self._pod_ended(pod, host)

    @staticmethod
    def _running_status(container, process, restarts):
        return {"name": container["name"], "ready": True, "started": True, "restartCount": restarts,
                "image": container.get("image", ""), "imageID": "",
                "containerID": f"emulator://{process.init_pid}",
                "state": {"running": {"startedAt": now_rfc3339()}}}

    def _watch_container(self, pod, host, container, processes):
        """Waits for one container; restarts it if the pod's restartPolicy says so."""
        name, restarts = container["name"], 0
        while True:
            code = processes[name].wait()
            time.sleep(NODE_CHECK_DELAY)
            if host.sshd_pid() is None:
                return  # lost with its node: no kubelet is left to report anything
            self._container_terminated(pod, name, code)
            policy = pod["spec"].get("restartPolicy", "Always")
            if self._deleting(pod) or policy == "Never" or (policy == "OnFailure" and code == 0):
                return
            time.sleep(RESTART_BACKOFF)
            if self._deleting(pod) or host.state != "Ready":
                return
            restarts += 1
            try:
                processes[name] = k8s_kubelet.start_container(host.sshd_pid(), pod, container,
                                                              host.ip, self.log_dir)
            except OSError:
                return
            status = self._running_status(container, processes[name], restarts)
            self._update(pod, lambda p: self._set_container_status(p, status))

    @staticmethod
    def _set_container_status(pod, status):
        statuses = pod["status"].setdefault("containerStatuses", [])
        for index, existing in enumerate(statuses):
            if existing["name"] == status["name"]:
                statuses[index] = status
                return
        statuses.append(status)

    def _container_terminated(self, pod, name, code):
        from k8s_nodes import set_condition

        def mutate(p):
            for status in p["status"].get("containerStatuses", []):
                if status["name"] == name:
                    started = (status.get("state", {}).get("running") or {}).get("startedAt")
                    status["ready"] = False
                    status["started"] = False
                    status["state"] = {"terminated": {
                        "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                        "startedAt": started, "finishedAt": now_rfc3339(),
                        "containerID": status.get("containerID")}}
            conditions = p["status"].setdefault("conditions", [])
            set_condition(conditions, "ContainersReady", "False", "ContainersNotReady")
            set_condition(conditions, "Ready", "False", "ContainersNotReady")
        self._update(pod, mutate)

    def _deleting(self, pod):
        try:
            current = self.store.get("pods", *_key(pod))
        except NotFound:
            return True
        return current["metadata"]["uid"] != pod["metadata"]["uid"] or \
            bool(current["metadata"].get("deletionTimestamp"))

    def _pod_ended(self, pod, host):
        uid = pod["metadata"]["uid"]
        with self.lock:
            self.running.pop(uid, None)
        if host.sshd_pid() is None:
            return  # node lost: the pod keeps its last status (see NodeEmulator.node_back)
        if self._finish_if_deleting(pod):
            return

        def finished(p):
            codes = [s["state"].get("terminated", {}).get("exitCode", 1)
                     for s in p["status"].get("containerStatuses", [])]
            p["status"]["phase"] = "Succeeded" if codes and all(c == 0 for c in codes) else "Failed"
        self._update(pod, finished)

    def _finish_if_deleting(self, pod):
        """Removes the pod from the store if it is being deleted; True if it was."""
        if not self._deleting(pod):
            return False
        try:
            current = self.store.get("pods", *_key(pod))
            if current["metadata"]["uid"] == pod["metadata"]["uid"]:
                self.store.delete("pods", *_key(pod))
        except NotFound:
            pass
        return True

    # ---- deletion ---------------------------------------------------------------------------

    def delete_pod(self, namespace, name, grace_seconds, reason=None):
        """Graceful deletion: deletionTimestamp (MODIFIED), SIGTERM, SIGKILL after the grace,
        then DELETED. A pod with nothing running is removed at once. Raises NotFound."""
        pod = self.store.get("pods", namespace, name)
        if grace_seconds is None:
            grace_seconds = pod["spec"].get("terminationGracePeriodSeconds", 30)
        uid = pod["metadata"]["uid"]
        with self.lock:
            processes = self.running.get(uid)
            kubelet = self.kubelets.get(uid)
        node = self.hosts.get(pod["spec"].get("nodeName") or "")
        lost_with_node = kubelet is not None and not kubelet.is_alive() and node is not None \
            and node.sshd_pid() is None
        nothing_running = kubelet is None or not kubelet.is_alive()
        if (nothing_running and not lost_with_node) or (grace_seconds == 0 and not processes):
            return self.store.delete("pods", namespace, name)

        def mark(p):
            if p["metadata"].get("deletionTimestamp"):
                return False
            when = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=grace_seconds)
            p["metadata"]["deletionTimestamp"] = when.strftime("%Y-%m-%dT%H:%M:%SZ")
            p["metadata"]["deletionGracePeriodSeconds"] = grace_seconds
            if reason:  # an eviction by the taint manager says why
                p["status"]["reason"], p["status"]["message"] = "Evicted", reason
        marked = self.store.update("pods", namespace, name, mark)
        if processes:
            for process in processes.values():
                threading.Thread(target=k8s_kubelet.kill_container, args=(process, grace_seconds),
                                 daemon=True).start()
        return marked
