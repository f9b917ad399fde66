"""The JobSet controller (jobset.x-k8s.io/v1alpha2), served only with the JobSet CRD
(`apiserver.py --jobset-crd`).

For each replicatedJob {name, replicas, template} it creates the child Jobs
`<jobset>-<replicatedJob>-<jobIndex>` from the template, labelled (and their pod templates too)
jobset.sigs.k8s.io/jobset-name, /replicatedjob-name, /replicatedjob-replicas and /job-index, with
an ownerReference (controller) to the JobSet; the Job controller (k8s_jobs.py) then makes their
pods, whose hostnames are `<job>-<podIndex>`, i.e. `<jobset>-<replicatedJob>-<jobIndex>-<podIndex>`.
With spec.network.enableDNSHostnames (the default) the pod templates get subdomain =
spec.network.subdomain or the JobSet's name, and a headless Service of that name, owned by the
JobSet, selects the JobSet's pods (as the real controller makes it). Status: replicatedJobsStatus,
and the conditions Completed (every child Job Complete: successPolicy All) or Failed (a child Job
Failed; failurePolicy.maxRestarts is read but no restart is made: dtrain asks for 0). Deleting a
JobSet (Background or Foreground) deletes its child Jobs, their pods and its Service; Orphan
leaves them, without the ownerReference.
"""

import copy
import queue
import threading

import k8s_objects
from k8s_status import ApiError
from k8s_store import Conflict, NotFound, now_rfc3339

GROUP_VERSION = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"


def jobset_owner(obj):
    """(uid, name) of the JobSet that controls `obj`, or (None, None)."""
    for reference in obj["metadata"].get("ownerReferences") or []:
        if reference.get("kind") == "JobSet" and reference.get("controller"):
            return reference.get("uid"), reference.get("name")
    return None, None


def child_job_name(jobset, replicated_job, index):
    return f"{jobset}-{replicated_job}-{index}"


def subdomain(jobset):
    """The pods' subdomain and the Service's name, or None without DNS hostnames."""
    network = jobset["spec"].get("network") or {}
    if not network.get("enableDNSHostnames", True):
        return None
    return network.get("subdomain") or jobset["metadata"]["name"]


def _condition(obj, *kinds):
    for condition in (obj.get("status") or {}).get("conditions", []):
        if condition.get("type") in kinds and condition.get("status") == "True":
            return condition["type"]
    return None


class JobSetController:
    def __init__(self, store, jobs):
        self.store = store
        self.jobs = jobs
        # Reconciling and deleting a JobSet exclude each other: a reconcile that read the JobSet
        # just before its deletion must not create a child Job after it (an orphan).
        self.lock = threading.Lock()
        self.work = queue.Queue()
        store.listeners.append(self._on_store_event)
        threading.Thread(target=self._worker, name="jobset-controller", daemon=True).start()

    def _on_store_event(self, resource, event_type, obj):
        # Runs under the store lock: only queue the work.
        if resource == "jobsets" and event_type != "DELETED":
            self.work.put((obj["metadata"]["namespace"], obj["metadata"]["name"]))
        elif resource == "jobs":
            uid, name = jobset_owner(obj)
            if uid:
                self.work.put((obj["metadata"]["namespace"], name))

    def _worker(self):
        while True:
            namespace, name = self.work.get()
            try:
                with self.lock:
                    self._reconcile(namespace, name)
            except Exception as error:
                print(f"apiserver: jobset {namespace}/{name}: {error!r}", flush=True)

    def _owned(self, resource, namespace, uid):
        items, _ = self.store.list(resource, namespace, lambda o: jobset_owner(o)[0] == uid)
        return items

    def _reconcile(self, namespace, name):
        try:
            jobset = self.store.get("jobsets", namespace, name)
        except NotFound:
            return
        uid = jobset["metadata"]["uid"]
        children = {job["metadata"]["name"]: job for job in self._owned("jobs", namespace, uid)}
        if not _condition(jobset, "Completed", "Failed"):
            service = subdomain(jobset)
            if service:
                self._ensure_service(jobset, service)
            for replicated in jobset["spec"]["replicatedJobs"]:
                for index in range(replicated["replicas"]):
                    job_name = child_job_name(name, replicated["name"], index)
                    if job_name not in children:
                        created = self._create_job(jobset, replicated, index, service)
                        if created:
                            children[job_name] = created
            self._finish_if_done(jobset, children)
        self._write_status(jobset, children)

    def _ensure_service(self, jobset, name):
        meta = jobset["metadata"]
        service = {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": name, "labels": {JOBSET_NAME: meta["name"]},
                                "ownerReferences": [self._owner_reference(jobset)]},
                   "spec": {"clusterIP": "None", "selector": {JOBSET_NAME: meta["name"]},
                            "publishNotReadyAddresses": (jobset["spec"].get("network") or {}).get(
                                "publishNotReadyAddresses", True)}}
        k8s_objects.prepare_service(service, meta["namespace"])
        try:
            self.store.create("services", meta["namespace"], service)
        except Conflict:
            pass  # made by an earlier reconcile (or a Service of that name was there already)

    @staticmethod
    def _owner_reference(jobset):
        return {"apiVersion": GROUP_VERSION, "kind": "JobSet", "name": jobset["metadata"]["name"],
                "uid": jobset["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}

    def _create_job(self, jobset, replicated, index, service):
        meta = jobset["metadata"]
        template = copy.deepcopy(replicated["template"])
        labels = {JOBSET_NAME: meta["name"], REPLICATED_JOB_NAME: replicated["name"],
                  REPLICATED_JOB_REPLICAS: str(replicated["replicas"]), JOB_INDEX: str(index)}
        job_meta = template.get("metadata") or {}
        job = {"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": child_job_name(meta["name"], replicated["name"], index),
                            "labels": dict(job_meta.get("labels") or {}, **labels),
                            "annotations": dict(job_meta.get("annotations") or {}, **labels),
                            "ownerReferences": [self._owner_reference(jobset)]},
               "spec": template["spec"]}
        pod_template = job["spec"]["template"]
        pod_meta = pod_template.setdefault("metadata", {})
        pod_meta["labels"] = dict(pod_meta.get("labels") or {}, **labels)
        pod_meta["annotations"] = dict(pod_meta.get("annotations") or {}, **labels)
        if service:
            pod_template["spec"]["subdomain"] = service
        try:
            k8s_objects.prepare_job(job, meta["namespace"])
            return self.store.create("jobs", meta["namespace"], job)
        except Conflict:
            return None  # a Job of that name that this JobSet does not own: left alone
        except ApiError as error:  # validated at create; a template only a Job could refuse
            print(f"apiserver: jobset {meta['name']}: child job {job['metadata']['name']}: "
                  f"{error.status.get('message')}", flush=True)
            return None

    def _finish_if_done(self, jobset, children):
        wanted = sum(r["replicas"] for r in jobset["spec"]["replicatedJobs"])
        failed = [name for name, job in children.items() if _condition(job, "Failed")]
        completed = [name for name, job in children.items() if _condition(job, "Complete")]
        if failed:
            # failurePolicy.maxRestarts (0 by default) would recreate every child Job here: not
            # emulated, a failed child Job fails the JobSet.
            self._set_terminal(jobset, "Failed", "FailedJobs", "jobset failed due to one or more job failures")
        elif len(completed) >= wanted:
            self._set_terminal(jobset, "Completed", "AllJobsCompleted", "jobset completed successfully")

    def _set_terminal(self, jobset, kind, reason, message):
        def mutate(obj):
            if _condition(obj, "Completed", "Failed"):
                return False
            now = now_rfc3339()
            obj["status"].setdefault("conditions", []).append(
                {"type": kind, "status": "True", "reason": reason, "message": message,
                 "lastTransitionTime": now})
            obj["status"]["terminalState"] = kind
        updated = self.store.update("jobsets", jobset["metadata"]["namespace"], jobset["metadata"]["name"], mutate)
        if updated:
            jobset["status"] = updated["status"]

    def _write_status(self, jobset, children):
        statuses = []
        for replicated in jobset["spec"]["replicatedJobs"]:
            mine = [job for job in children.values()
                    if job["metadata"]["labels"].get(REPLICATED_JOB_NAME) == replicated["name"]]
            statuses.append({
                "name": replicated["name"],
                "ready": sum(1 for job in mine if (job["status"].get("ready") or 0) + (job["status"].get(
                    "succeeded") or 0) >= job["spec"]["parallelism"] and not _condition(job, "Failed")),
                "succeeded": sum(1 for job in mine if _condition(job, "Complete")),
                "failed": sum(1 for job in mine if _condition(job, "Failed")),
                "active": sum(1 for job in mine if (job["status"].get("active") or 0) > 0),
                "suspended": 0})

        def mutate(obj):
            if obj["status"].get("replicatedJobsStatus") == statuses:
                return False
            obj["status"]["replicatedJobsStatus"] = statuses
        self.store.update("jobsets", jobset["metadata"]["namespace"], jobset["metadata"]["name"], mutate)

    def delete_jobset(self, namespace, name, propagation):
        """Deletes the JobSet now, then its child Jobs (with their pods) and its Service
        (Background/Foreground), or orphans them."""
        with self.lock:
            jobset = self.store.delete("jobsets", namespace, name)
            uid = jobset["metadata"]["uid"]
            for resource in ("jobs", "services"):
                for obj in self._owned(resource, namespace, uid):
                    child = obj["metadata"]["name"]
                    if propagation == "Orphan":
                        self.store.update(resource, namespace, child, lambda o: o["metadata"].pop(
                            "ownerReferences", None) and None)
                        continue
                    try:
                        if resource == "jobs":
                            self.jobs.delete_job(namespace, child, "Background")
                        else:
                            self.store.delete(resource, namespace, child)
                    except NotFound:
                        pass
            return jobset
