"""The Job controller (batch/v1) and the garbage collector for the pods Jobs own.

Indexed Jobs get pods `<job>-<index>-<5 random>` with the index as label and annotation
(batch.kubernetes.io/job-completion-index), env JOB_COMPLETION_INDEX, spec.hostname
`<job>-<index>` and the template's subdomain, and an ownerReference to the Job. As the real
controller does (podReplacementPolicy TerminatingOrFailed), an index whose pod failed, was
deleted or is terminating gets a new pod, until backoffLimit failures fail the Job. With
backoffLimitPerIndex (Kubernetes 1.29+), each index has its own limit instead: an index past it
is failed (status.failedIndexes) and gets no new pod, the other indexes' pods run on, and the Job
fails only past maxFailedIndexes (then its live pods are deleted) or once every index is done.
Deleting a Job (propagationPolicy Background or Foreground) deletes its pods gracefully;
Orphan leaves them, without the ownerReference.
"""

import copy
import queue
import threading

from k8s_objects import random_suffix
from k8s_store import NotFound, now_rfc3339, Conflict

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
TERMINAL = ("Succeeded", "Failed")


def owner_uid(pod):
    for reference in pod["metadata"].get("ownerReferences") or []:
        if reference.get("kind") == "Job" and reference.get("controller"):
            return reference.get("uid"), reference.get("name")
    return None, None


def index_ranges(indexes):
    """[0, 1, 2, 5] -> "0-2,5", the format of status.completedIndexes."""
    parts, start, previous = [], None, None
    for index in sorted(indexes):
        if start is None:
            start = previous = index
        elif index == previous + 1:
            previous = index
        else:
            parts.append(f"{start}-{previous}" if previous > start else str(start))
            start = previous = index
    if start is not None:
        parts.append(f"{start}-{previous}" if previous > start else str(start))
    return ",".join(parts)


class JobController:
    def __init__(self, store, nodes):
        self.store = store
        self.nodes = nodes
        self.work = queue.Queue()
        self.failed_uids = {}  # job uid -> uids of its pods counted as failed
        store.listeners.append(self._on_store_event)
        threading.Thread(target=self._worker, name="job-controller", daemon=True).start()

    def _on_store_event(self, resource, event_type, obj):
        # Runs under the store lock: only queue the work.
        if resource == "jobs" and event_type != "DELETED":
            self.work.put((obj["metadata"]["namespace"], obj["metadata"]["name"], None))
        elif resource == "pods":
            uid, name = owner_uid(obj)
            if uid:
                gone = obj if event_type == "DELETED" else None
                self.work.put((obj["metadata"]["namespace"], name, gone))

    def _worker(self):
        while True:
            namespace, name, deleted_pod = self.work.get()
            try:
                self._reconcile(namespace, name, deleted_pod)
            except Exception as error:
                print(f"apiserver: job {namespace}/{name}: {error!r}", flush=True)

    def _reconcile(self, namespace, name, deleted_pod):
        try:
            job = self.store.get("jobs", namespace, name)
        except NotFound:
            return
        uid, spec = job["metadata"]["uid"], job["spec"]
        counted = self.failed_uids.setdefault(uid, {})  # failed pod uid -> its index
        if deleted_pod is not None and owner_uid(deleted_pod)[0] == uid \
                and deleted_pod["status"].get("phase") != "Succeeded":
            counted[deleted_pod["metadata"]["uid"]] = self._index(deleted_pod)
        pods, _ = self.store.list("pods", namespace, lambda p: owner_uid(p)[0] == uid)
        for pod in pods:
            if pod["status"].get("phase") == "Failed" or pod["metadata"].get("deletionTimestamp"):
                counted[pod["metadata"]["uid"]] = self._index(pod)
        failed_indexes = self._failed_indexes(spec, counted)
        live = [p for p in pods if p["status"].get("phase") not in TERMINAL
                and not p["metadata"].get("deletionTimestamp")]
        succeeded = {self._index(p) for p in pods if p["status"].get("phase") == "Succeeded"}
        finished = any(c["type"] in ("Complete", "Failed") and c["status"] == "True"
                       for c in job["status"].get("conditions", []))
        if not finished and not job["metadata"].get("deletionTimestamp"):
            if len(counted) > spec["backoffLimit"]:
                self._finish(job, "Failed", "BackoffLimitExceeded", live)
                finished = True
            elif "maxFailedIndexes" in spec and len(failed_indexes) > spec["maxFailedIndexes"]:
                self._finish(job, "Failed", "MaxFailedIndexesExceeded", live)
                finished = True
            elif self._complete(spec, succeeded | failed_indexes):
                if failed_indexes:
                    self._finish(job, "Failed", "FailedIndexes", [])
                else:
                    self._finish(job, "Complete", None, [])
                finished = True
            else:
                live += self._create_missing(job, live, succeeded | failed_indexes)
        self._write_status(job, live, pods, succeeded, len(counted), failed_indexes)

    @staticmethod
    def _failed_indexes(spec, counted):
        """With backoffLimitPerIndex: the indexes whose failures are past it."""
        if "backoffLimitPerIndex" not in spec:
            return set()
        failures = {}
        for index in counted.values():
            if index is not None:
                failures[index] = failures.get(index, 0) + 1
        return {index for index, count in failures.items() if count > spec["backoffLimitPerIndex"]}

    @staticmethod
    def _index(pod):
        try:
            return int(pod["metadata"].get("annotations", {}).get(INDEX_KEY, ""))
        except ValueError:
            return None

    @staticmethod
    def _complete(spec, succeeded):
        if spec["completionMode"] == "Indexed":
            return set(range(spec["completions"])) <= succeeded
        return len(succeeded) >= spec["completions"]  # NonIndexed: None counts once per pod

    def _create_missing(self, job, live, succeeded):
        spec = job["spec"]
        room = spec["parallelism"] - len(live)
        created = []
        if spec["completionMode"] == "Indexed":
            busy = {self._index(p) for p in live} | succeeded
            wanted = [i for i in range(spec["completions"]) if i not in busy]
        else:
            wanted = [None] * max(0, spec["completions"] - len(succeeded) - len(live))
        for index in wanted[:max(0, room)]:
            created.append(self._create_pod(job, index))
        return created

    def _create_pod(self, job, index):
        template = copy.deepcopy(job["spec"]["template"])
        meta = template.get("metadata") or {}
        name = job["metadata"]["name"]
        labels = dict(meta.get("labels") or {})
        annotations = dict(meta.get("annotations") or {})
        labels["batch.kubernetes.io/controller-uid"] = job["metadata"]["uid"]
        labels["controller-uid"] = job["metadata"]["uid"]
        spec = template["spec"]
        if index is not None:
            labels[INDEX_KEY] = annotations[INDEX_KEY] = str(index)
            spec["hostname"] = f"{name}-{index}"
            for container in spec["containers"]:
                container.setdefault("env", []).append({"name": "JOB_COMPLETION_INDEX", "valueFrom": {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_KEY}']"}}})
        prefix = f"{name}-{index}-" if index is not None else f"{name}-"
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": prefix + random_suffix(), "generateName": prefix,
                            "labels": labels, "annotations": annotations,
                            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                                 "uid": job["metadata"]["uid"], "controller": True,
                                                 "blockOwnerDeletion": True}]},
               "spec": spec}
        from k8s_objects import default_pod_spec
        default_pod_spec(spec)
        pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
        try:
            return self.store.create("pods", job["metadata"]["namespace"], pod)
        except Conflict:
            return self._create_pod(job, index)  # the random suffix collided: another one

    def _finish(self, job, kind, reason, live):
        for pod in live:
            try:
                self.nodes.delete_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], None)
            except NotFound:
                pass

        def mutate(j):
            condition = {"type": kind, "status": "True", "lastProbeTime": now_rfc3339(),
                         "lastTransitionTime": now_rfc3339()}
            if reason:
                condition["reason"] = reason
                condition["message"] = {
                    "BackoffLimitExceeded": "Job has reached the specified backoff limit",
                    "MaxFailedIndexesExceeded": "Job has exceeded the specified maximal number of failed indexes",
                    "FailedIndexes": "Job has failed indexes"}[reason]
            j["status"].setdefault("conditions", []).append(condition)
            if kind == "Complete":
                j["status"]["completionTime"] = now_rfc3339()
        self.store.update("jobs", job["metadata"]["namespace"], job["metadata"]["name"], mutate)

    def _write_status(self, job, live, pods, succeeded, failed, failed_indexes):
        ready = sum(1 for p in live if any(c["type"] == "Ready" and c["status"] == "True"
                                           for c in p["status"].get("conditions", [])))
        terminating = sum(1 for p in pods if p["metadata"].get("deletionTimestamp"))
        wanted = {"active": len(live), "ready": ready, "terminating": terminating,
                  "succeeded": len(succeeded), "failed": failed}
        if job["spec"]["completionMode"] == "Indexed" and succeeded:
            wanted["completedIndexes"] = index_ranges(i for i in succeeded if i is not None)
        if "backoffLimitPerIndex" in job["spec"]:
            wanted["failedIndexes"] = index_ranges(failed_indexes)

        def mutate(j):
            status = j["status"]
            status.setdefault("startTime", now_rfc3339())
            if all(status.get(k) == v for k, v in wanted.items()):
                return False
            status.update(wanted)
        self.store.update("jobs", job["metadata"]["namespace"], job["metadata"]["name"], mutate)

    def delete_job(self, namespace, name, propagation):
        """Deletes the Job now and its pods after (Background/Foreground), or orphans them."""
        job = self.store.delete("jobs", namespace, name)
        uid = job["metadata"]["uid"]
        self.failed_uids.pop(uid, None)
        pods, _ = self.store.list("pods", namespace, lambda p: owner_uid(p)[0] == uid)
        for pod in pods:
            if propagation == "Orphan":
                self.store.update("pods", namespace, pod["metadata"]["name"], lambda p: p["metadata"].pop(
                    "ownerReferences", None) and None)
                continue
            try:
                self.nodes.delete_pod(namespace, pod["metadata"]["name"], None)
            except NotFound:
                pass
        return job
