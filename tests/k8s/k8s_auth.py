"""Users (bearer tokens) and what each may do, in the shape of RBAC rules.

Two users, as the contract's kubeconfig names them: "dtrain-admin" (context dtrain-test) may do
everything; "no-exec" may get/list/watch/create/delete/patch/update pods, jobs, services and
jobsets and read nodes and namespaces, but NOT create pods/exec. The tokens are random, written at `up`
into the kubeconfig and the server's users file, never logged.
"""

import json

ALL = ["*"]

RULES = {
    "dtrain-admin": [{"verbs": ALL, "apiGroups": ALL, "resources": ALL}],
    "no-exec": [
        {"verbs": ["get", "list", "watch", "create", "delete", "patch", "update"],
         "apiGroups": ["", "batch"], "resources": ["pods", "jobs", "services", "pods/status"]},
        {"verbs": ["get", "list", "watch", "create", "delete", "patch", "update"],
         "apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"]},
        {"verbs": ["get", "list", "watch"], "apiGroups": [""], "resources": ["nodes", "namespaces"]},
        {"verbs": ["create"], "apiGroups": ["authorization.k8s.io"],
         "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"]},
    ],
}


def load_tokens(path):
    """The users file: {"tokens": {TOKEN: USER}}."""
    with open(path) as handle:
        return json.load(handle)["tokens"]


def _matches(allowed, value):
    return "*" in allowed or value in allowed


def allowed(user, verb, group, resource):
    """resource is "pods" or "pods/exec"."""
    for rule in RULES.get(user, []):
        if (_matches(rule["verbs"], verb) and _matches(rule["apiGroups"], group)
                and _matches(rule["resources"], resource)):
            return True
    return False


def access_review(user, review):
    """Fills status of a SelfSubjectAccessReview (kubectl auth can-i)."""
    attributes = (review.get("spec") or {}).get("resourceAttributes")
    if attributes is None:
        # Non-resource URLs (can-i get /logs): only the admin.
        verdict = user == "dtrain-admin"
    else:
        resource = attributes.get("resource", "")
        if attributes.get("subresource"):
            resource = f"{resource}/{attributes['subresource']}"
        verdict = allowed(user, attributes.get("verb", ""), attributes.get("group", ""), resource)
    review["status"] = {"allowed": verdict}
    if not verdict:
        review["status"]["reason"] = f'User "{user}" has no rule that allows it'
    return review


def rules_review(user, review):
    """Fills status of a SelfSubjectRulesReview (kubectl auth can-i --list)."""
    review["status"] = {
        "resourceRules": [dict(rule) for rule in RULES.get(user, [])],
        "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/version", "/api", "/api/*",
                                                                   "/apis", "/apis/*", "/openapi/*"]}],
        "incomplete": False,
    }
    return review
