"""meta.k8s.io/v1 Table answers for `kubectl get` without -o (what a human reads)."""

import datetime


def wants_table(accept):
    return "as=Table" in accept


def _age(obj):
    created = obj["metadata"].get("creationTimestamp")
    if not created:
        return "<unknown>"
    then = datetime.datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.timezone.utc)
    seconds = int((datetime.datetime.now(datetime.timezone.utc) - then).total_seconds())
    return f"{seconds}s" if seconds < 120 else f"{seconds // 60}m"


def _status(obj):
    kind = obj.get("kind")
    if kind == "Pod":
        if obj["metadata"].get("deletionTimestamp"):
            return "Terminating"
        return obj["status"].get("phase", "")
    if kind == "Node":
        ready = [c for c in obj["status"].get("conditions", []) if c["type"] == "Ready"]
        return "Ready" if ready and ready[0]["status"] == "True" else "NotReady"
    if kind in ("Job", "JobSet"):
        done = [c["type"] for c in obj["status"].get("conditions", []) if c["status"] == "True"]
        return done[0] if done else "Running"
    return ""


def table(items, resource_version):
    columns = [{"name": "Name", "type": "string", "format": "name", "description": "Name"},
               {"name": "Status", "type": "string", "format": "", "description": "Status"},
               {"name": "Node", "type": "string", "format": "", "description": "Node"},
               {"name": "Age", "type": "string", "format": "", "description": "Age"}]
    rows = [{"cells": [o["metadata"]["name"], _status(o), o.get("spec", {}).get("nodeName", ""), _age(o)],
             "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                        "metadata": o["metadata"]}} for o in items]
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1",
            "metadata": {"resourceVersion": resource_version}, "columnDefinitions": columns, "rows": rows}
