"""Validation and defaulting of what clients create: Pods, Jobs, Services.

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


PREPARE = {"pods": prepare_pod, "jobs": prepare_job, "services": prepare_service}
