"""Validation and defaulting of what clients create: Pods, Jobs, Services, JobSets.

Validation covers what the emulator relies on and what a real server would reject in the same
way (422 Invalid with field causes); it is not the full Kubernetes validation.
"""

import random
import re

from k8s_status import invalid, bad_request

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


def random_suffix(length=5):
    # Kubernetes' generateName alphabet: no vowels, no digits that look like letters.
    return "".join(random.choice("bcdfghjklmnpqrstvwxz2456789") for _ in range(length))


def assign_name(obj, kind):
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise bad_request(f"{kind}: metadata must be an object")
    if not meta.get("name") and meta.get("generateName"):
        meta["name"] = meta["generateName"] + random_suffix()
    name = meta.get("name")
    if not name:
        raise invalid(kind, "", [("metadata.name", "FieldValueRequired",
                                  "Required value: name or generateName is required")])
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise invalid(kind, str(name), [("metadata.name", "FieldValueInvalid",
                                         f'Invalid value: "{name}": a lowercase RFC 1123 subdomain '
                                         "must consist of lower case alphanumeric characters, '-' "
                                         "or '.', and must start and end with an alphanumeric character")])
    for key in ("labels", "annotations"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            raise bad_request(f"{kind}: metadata.{key} must be an object")
    return name


def _validate_containers(kind, name, pod_spec, prefix):
    containers = pod_spec.get("containers") if isinstance(pod_spec, dict) else None
    if not containers or not isinstance(containers, list):
        raise invalid(kind, name, [(f"{prefix}.containers", "FieldValueRequired", "Required value")])
    causes = []
    for index, container in enumerate(containers):
        where = f"{prefix}.containers[{index}]"
        if not isinstance(container, dict):
            raise bad_request(f"{where} must be an object")
        if not container.get("name") or not _DNS_LABEL.fullmatch(str(container["name"])):
            causes.append((f"{where}.name", "FieldValueRequired", "Required value"))
        if not container.get("image"):
            causes.append((f"{where}.image", "FieldValueRequired", "Required value"))
        for key in ("command", "args"):
            value = container.get(key)
            if value is not None and (not isinstance(value, list)
                                      or not all(isinstance(v, str) for v in value)):
                causes.append((f"{where}.{key}", "FieldValueInvalid", "Invalid value: must be a list of strings"))
    if causes:
        raise invalid(kind, name, causes)


def default_pod_spec(spec):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    tolerations = spec.setdefault("tolerations", [])
    # The DefaultTolerationSeconds admission plugin: 300 s for not-ready and unreachable.
    for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
        if not any(t.get("key") == key for t in tolerations if isinstance(t, dict)):
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": 300})
    for container in spec["containers"]:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("resources", {})


def prepare_pod(pod, namespace):
    """Validates and defaults a Pod about to be created; returns its name."""
    name = assign_name(pod, "Pod")
    pod["apiVersion"], pod["kind"] = "v1", "Pod"
    spec = pod.get("spec")
    _validate_containers("Pod", name, spec, "spec")
    restart = spec.get("restartPolicy", "Always")
    if restart not in ("Always", "OnFailure", "Never"):
        raise invalid("Pod", name, [("spec.restartPolicy", "FieldValueNotSupported",
                                     f'Unsupported value: "{restart}": supported values: "Always", "OnFailure", "Never"')])
    default_pod_spec(spec)
    pod["status"] = {"phase": "Pending", "qosClass": "BestEffort"}
    return name


def prepare_job(job, namespace):
    """Validates and defaults a batch/v1 Job; returns its name."""
    name = assign_name(job, "Job")
    job["apiVersion"], job["kind"] = "batch/v1", "Job"
    spec = job.get("spec")
    if not isinstance(spec, dict) or not isinstance(spec.get("template"), dict):
        raise invalid("Job", name, [("spec.template", "FieldValueRequired", "Required value")], "batch")
    template_spec = spec["template"].get("spec")
    _validate_containers("Job", name, template_spec, "spec.template.spec")
    if template_spec.get("restartPolicy") not in ("Never", "OnFailure"):
        raise invalid("Job", name, [("spec.template.spec.restartPolicy", "FieldValueRequired",
                                     'Required value: valid values: "OnFailure", "Never"')], "batch")
    spec.setdefault("completionMode", "NonIndexed")
    spec.setdefault("completions", 1)
    spec.setdefault("parallelism", spec["completions"])
    # As the API server defaults it: with backoffLimitPerIndex the Job-level limit is max int32.
    spec.setdefault("backoffLimit", 2147483647 if "backoffLimitPerIndex" in spec else 6)
    if spec["completionMode"] not in ("Indexed", "NonIndexed"):
        raise invalid("Job", name, [("spec.completionMode", "FieldValueNotSupported",
                                     'Unsupported value: supported values: "NonIndexed", "Indexed"')], "batch")
    if "backoffLimitPerIndex" in spec and spec["completionMode"] != "Indexed":
        raise invalid("Job", name, [("spec.backoffLimitPerIndex", "FieldValueForbidden",
                                     "Forbidden: requires indexed completion mode")], "batch")
    if "maxFailedIndexes" in spec:
        if "backoffLimitPerIndex" not in spec:
            raise invalid("Job", name, [("spec.maxFailedIndexes", "FieldValueForbidden",
                                         "Forbidden: cannot set maxFailedIndexes when backoffLimitPerIndex is not set")],
                          "batch")
        if isinstance(spec["maxFailedIndexes"], int) and spec["maxFailedIndexes"] > spec["completions"]:
            raise invalid("Job", name, [("spec.maxFailedIndexes", "FieldValueInvalid",
                                         "Invalid value: must be less than or equal to completions")], "batch")
    for key in ("completions", "parallelism", "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes"):
        if key not in spec:
            continue
        if not isinstance(spec[key], int) or spec[key] < 0:
            raise invalid("Job", name, [(f"spec.{key}", "FieldValueInvalid",
                                         "Invalid value: must be greater than or equal to 0")], "batch")
    labels = spec["template"].setdefault("metadata", {}).setdefault("labels", {})
    labels.setdefault("batch.kubernetes.io/job-name", name)
    labels.setdefault("job-name", name)
    job["status"] = {"active": 0, "succeeded": 0, "failed": 0}
    return name


def prepare_service(service, namespace):
    name = assign_name(service, "Service")
    service["apiVersion"], service["kind"] = "v1", "Service"
    spec = service.setdefault("spec", {})
    if not isinstance(spec, dict):
        raise bad_request("Service: spec must be an object")
    spec.setdefault("type", "ClusterIP")
    if spec.get("clusterIP") is None:
        spec["clusterIP"] = f"10.96.{random.randint(0, 255)}.{random.randint(1, 254)}"
    spec["clusterIPs"] = [spec["clusterIP"]]
    service["status"] = {"loadBalancer": {}}
    return name


def _job_template_causes(prefix, template):
    """What a JobSet's replicatedJob template lacks that its child Job would need."""
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        return [(prefix, "FieldValueRequired", "Required value")]
    pod_template = template["spec"].get("template")
    if not isinstance(pod_template, dict) or not isinstance(pod_template.get("spec"), dict):
        return [(f"{prefix}.spec.template", "FieldValueRequired", "Required value")]
    causes = []
    pod_spec = pod_template["spec"]
    if not pod_spec.get("containers") or not isinstance(pod_spec["containers"], list):
        causes.append((f"{prefix}.spec.template.spec.containers", "FieldValueRequired", "Required value"))
    if pod_spec.get("restartPolicy") not in ("Never", "OnFailure"):
        causes.append((f"{prefix}.spec.template.spec.restartPolicy", "FieldValueRequired",
                       'Required value: valid values: "OnFailure", "Never"'))
    return causes


def prepare_jobset(jobset, namespace):
    """Validates and defaults a jobset.x-k8s.io/v1alpha2 JobSet (what the CRD's schema and the
    JobSet webhook refuse of the fields the emulator uses); returns its name."""
    group = "jobset.x-k8s.io"
    name = assign_name(jobset, "JobSet")
    jobset["apiVersion"], jobset["kind"] = "jobset.x-k8s.io/v1alpha2", "JobSet"
    spec = jobset.get("spec")
    if not isinstance(spec, dict):
        raise invalid("JobSet", name, [("spec", "FieldValueRequired", "Required value")], group)
    replicated_jobs = spec.get("replicatedJobs")
    if not isinstance(replicated_jobs, list) or not replicated_jobs:
        raise invalid("JobSet", name, [("spec.replicatedJobs", "FieldValueRequired", "Required value")], group)
    causes, seen = [], set()
    for index, replicated in enumerate(replicated_jobs):
        where = f"spec.replicatedJobs[{index}]"
        if not isinstance(replicated, dict):
            raise bad_request(f"{where} must be an object")
        rj_name = replicated.get("name")
        if not isinstance(rj_name, str) or not _DNS_LABEL.fullmatch(rj_name):
            causes.append((f"{where}.name", "FieldValueRequired", "Required value: a DNS-1123 label"))
        elif rj_name in seen:
            causes.append((f"{where}.name", "FieldValueDuplicate", f'Duplicate value: "{rj_name}"'))
        seen.add(rj_name)
        replicated.setdefault("replicas", 1)
        if not isinstance(replicated["replicas"], int) or replicated["replicas"] < 0:
            causes.append((f"{where}.replicas", "FieldValueInvalid", "Invalid value: must be greater than or equal to 0"))
        causes += _job_template_causes(f"{where}.template", replicated.get("template"))
        if causes or not isinstance(rj_name, str):
            continue
        # As the JobSet webhook: a child Job's name and its pods' hostnames are DNS labels.
        last_job = f"{name}-{rj_name}-{max(0, replicated['replicas'] - 1)}"
        pods = replicated["template"]["spec"].get("completions") or 1
        if len(last_job) > 63:
            causes.append(("metadata.name", "FieldValueInvalid",
                           "Invalid value: JobSet name is too long, job names generated for this JobSet "
                           "will exceed 63 characters"))
        elif len(f"{last_job}-{max(0, pods - 1)}") > 63:
            causes.append(("metadata.name", "FieldValueInvalid",
                           "Invalid value: JobSet name is too long, pod hostnames generated for this "
                           "JobSet will exceed 63 characters"))
    if causes:
        raise invalid("JobSet", name, causes, group)
    network = spec.setdefault("network", {})
    if not isinstance(network, dict):
        raise bad_request("JobSet: spec.network must be an object")
    network.setdefault("enableDNSHostnames", True)
    network.setdefault("publishNotReadyAddresses", True)
    subdomain = network.get("subdomain")
    if subdomain is not None and (not isinstance(subdomain, str) or not _DNS_LABEL.fullmatch(subdomain)):
        raise invalid("JobSet", name, [("spec.network.subdomain", "FieldValueInvalid",
                                        f'Invalid value: "{subdomain}": must be a DNS-1123 label')], group)
    failure = spec.get("failurePolicy")
    if failure is not None and (not isinstance(failure, dict) or not isinstance(failure.get("maxRestarts", 0), int)
                                or failure.get("maxRestarts", 0) < 0):
        raise invalid("JobSet", name, [("spec.failurePolicy.maxRestarts", "FieldValueInvalid",
                                        "Invalid value: must be greater than or equal to 0")], group)
    spec.setdefault("successPolicy", {"operator": "All", "targetReplicatedJobs": []})
    jobset["status"] = {"restarts": 0}
    return name


PREPARE = {"pods": prepare_pod, "jobs": prepare_job, "services": prepare_service, "jobsets": prepare_jobset}
