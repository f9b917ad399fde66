"""The API surface: which resources exist, and the discovery documents kubectl reads.

Only the legacy discovery format (APIVersions, APIGroupList, APIResourceList) is served; kubectl
1.32 asks for the aggregated format first (Accept: ...;g=apidiscovery.k8s.io;v=v2...) and falls
back to the legacy one when the answer's Content-Type is plain application/json, as it does
against servers older than 1.26.
"""

from dataclasses import dataclass, field

SERVER_VERSION = {
    "major": "1", "minor": "32", "gitVersion": "v1.32.0-dtrain-emulator",
    "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.23.0", "compiler": "gc",
    "platform": "linux/amd64",
}

_STANDARD_VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


@dataclass(frozen=True)
class Resource:
    group: str          # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: tuple = tuple(_STANDARD_VERBS)
    short_names: tuple = ()
    subresources: tuple = field(default=())  # (name, verbs, kind)

    @property
    def group_version(self):
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCES = [
    Resource("", "v1", "pods", "Pod", True, short_names=("po",),
             subresources=(("exec", ("create", "get"), "PodExecOptions"),
                           ("status", ("get", "patch", "update"), "Pod"))),
    Resource("", "v1", "services", "Service", True, short_names=("svc",)),
    Resource("", "v1", "nodes", "Node", False, verbs=("get", "list", "watch"), short_names=("no",)),
    Resource("", "v1", "namespaces", "Namespace", False, verbs=("get", "list", "watch"),
             short_names=("ns",)),
    Resource("batch", "v1", "jobs", "Job", True, subresources=(("status", ("get",), "Job"),)),
    Resource("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview",
             False, verbs=("create",)),
    Resource("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview",
             False, verbs=("create",)),
]

GROUP_VERSIONS = {"batch": "v1", "authorization.k8s.io": "v1"}

JOBSET_CRD = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", True)


def install_jobset_crd():
    """Serves jobsets.jobset.x-k8s.io, as where the JobSet CRD is installed (`apiserver.py
    --jobset-crd`, `testcluster.sh up N --kubernetes --kube-jobset-crd`): discovery lists it and
    its requests reach the store (k8s_jobsets.py runs them). Without it, as on a server without
    the CRD, discovery has no such group and its paths are 404."""
    if JOBSET_CRD not in RESOURCES:
        RESOURCES.append(JOBSET_CRD)
        GROUP_VERSIONS[JOBSET_CRD.group] = JOBSET_CRD.version


def find_resource(group, version, plural):
    for resource in RESOURCES:
        if (resource.group, resource.version, resource.plural) == (group, version, plural):
            return resource
    return None


def api_versions():
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "10.77.0.2:6443"}]}


def api_group_list():
    groups = []
    for group, version in GROUP_VERSIONS.items():
        entry = {"groupVersion": f"{group}/{version}", "version": version}
        groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


def api_group(group):
    version = GROUP_VERSIONS.get(group)
    if version is None:
        return None
    entry = {"groupVersion": f"{group}/{version}", "version": version}
    return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": [entry],
            "preferredVersion": entry}


def api_resource_list(group, version):
    """The APIResourceList of a group version, or None if there is no such group version."""
    entries = []
    for resource in RESOURCES:
        if (resource.group, resource.version) != (group, version):
            continue
        entries.append({"name": resource.plural, "singularName": resource.kind.lower(),
                        "namespaced": resource.namespaced, "kind": resource.kind,
                        "verbs": list(resource.verbs), "shortNames": list(resource.short_names)})
        for sub, verbs, kind in resource.subresources:
            entries.append({"name": f"{resource.plural}/{sub}", "singularName": "",
                            "namespaced": resource.namespaced, "kind": kind, "verbs": list(verbs)})
    if not entries:
        return None
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
            "resources": entries}


# ---- OpenAPI v3 -----------------------------------------------------------------------------
# Only what kubectl's validation reads: for each kind, a PATCH operation that names the
# `fieldValidation` query parameter. kubectl then leaves validation to the server (it sends
# fieldValidation=Strict) instead of downloading full schemas; the emulator checks what it
# needs (k8s_objects.py). Without these documents kubectl create needs --validate=false.

def _openapi_path(group_version):
    return "api/" + group_version if "/" not in group_version else "apis/" + group_version


def openapi_v3_root():
    paths = {}
    for group_version in ["v1"] + [f"{g}/{v}" for g, v in GROUP_VERSIONS.items()]:
        path = _openapi_path(group_version)
        paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash=DTRAINEMULATOR1"}
    return {"paths": paths}


def openapi_v3_document(path):
    """The OpenAPI v3 document of api/v1 or apis/G/V, or None."""
    operations = {}
    for resource in RESOURCES:
        if _openapi_path(resource.group_version) != path:
            continue
        prefix = "/" + path + ("/namespaces/{namespace}" if resource.namespaced else "")
        operation = {"operationId": f"patch{resource.kind}",
                     "x-kubernetes-group-version-kind": {"group": resource.group, "version": resource.version,
                                                         "kind": resource.kind},
                     "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                                    {"name": "dryRun", "in": "query", "schema": {"type": "string"}}],
                     "responses": {"200": {"description": "OK"}}}
        operations[f"{prefix}/{resource.plural}/{{name}}"] = {"patch": operation}
    if not operations:
        return None
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (dtrain emulator)", "version": "v1.32.0"},
            "paths": operations, "components": {"schemas": {}}}
