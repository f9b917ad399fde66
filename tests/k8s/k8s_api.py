"""The REST verbs over the store: get, list, watch, create, update/patch, delete, the access
reviews, and pods/exec (handed to k8s_exec)."""

import copy
import json
import time

import k8s_auth
import k8s_objects
import k8s_status
import k8s_tables
from k8s_selectors import (SelectorError, fields_match, labels_match, parse_field_selector,
                           parse_label_selector)
from k8s_status import ApiError
from k8s_store import Conflict, Gone, NotFound

WATCH_TIMEOUT_DEFAULT = 1800


def merge_patch(target, patch):
    """RFC 7386 JSON merge patch (also used for strategic merge patches: lists are replaced)."""
    if not isinstance(patch, dict):
        return patch
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = merge_patch(target.get(key), value)
    return target


class Api:
    def __init__(self, store, nodes, jobs, jobsets, exec_server):
        self.store, self.nodes, self.jobs, self.jobsets, self.exec_server = store, nodes, jobs, jobsets, exec_server

    def handle(self, http, method, request):
        resource = request.resource
        if resource.namespaced and request.namespace:
            self._require_namespace(request.namespace)
        if request.subresource == "exec":
            return self.exec_server.serve(http, self._get(request), http.query_list)
        if resource.plural in ("selfsubjectaccessreviews", "selfsubjectrulesreviews"):
            return self._review(http, method, request)
        if request.subresource and request.subresource != "status":
            raise ApiError(k8s_status.status(404, "NotFound", "the server could not find the requested resource"))
        handler = {"get": self._do_get, "list": self._do_list, "watch": self._do_watch,
                   "create": self._do_create, "update": self._do_update, "patch": self._do_update,
                   "delete": self._do_delete}.get(request.verb)
        if handler is None or request.verb not in resource.verbs and request.verb != "patch":
            raise k8s_status.method_not_allowed(method)
        return handler(http, request)

    def _require_namespace(self, namespace):
        try:
            self.store.get("namespaces", "", namespace)
        except NotFound:
            raise k8s_status.not_found("namespaces", namespace)

    def _get(self, request):
        try:
            return self.store.get(request.resource.plural, request.namespace, request.name)
        except NotFound:
            raise k8s_status.not_found(request.resource.plural, request.name, request.resource.group)

    # ---- reads ------------------------------------------------------------------------------

    def _do_get(self, http, request):
        obj = self._get(request)
        if k8s_tables.wants_table(http.headers.get("Accept", "")):
            return http.send_json(200, k8s_tables.table([obj], obj["metadata"]["resourceVersion"]))
        http.send_json(200, obj)

    def _predicate(self, http, request):
        try:
            labels = parse_label_selector(http.query.get("labelSelector", ""))
            fields = parse_field_selector(http.query.get("fieldSelector", ""), request.resource.plural)
        except SelectorError as error:
            raise k8s_status.bad_request(str(error))
        return lambda obj: labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, obj)

    def _do_list(self, http, request):
        predicate = self._predicate(http, request)
        items, revision = self.store.list(request.resource.plural, request.namespace or None, predicate)
        if k8s_tables.wants_table(http.headers.get("Accept", "")):
            return http.send_json(200, k8s_tables.table(items, str(revision)))
        http.send_json(200, {"kind": request.resource.kind + "List",
                             "apiVersion": request.resource.group_version,
                             "metadata": {"resourceVersion": str(revision)}, "items": items})

    def _do_watch(self, http, request):
        """A chunked stream of {"type", "object"} lines, from resourceVersion (or, without one,
        every matching object as ADDED first), until timeoutSeconds or the client leaves."""
        predicate = self._predicate(http, request)
        plural, namespace = request.resource.plural, request.namespace
        try:
            timeout = min(int(http.query.get("timeoutSeconds") or WATCH_TIMEOUT_DEFAULT), 3600)
            start = http.query.get("resourceVersion", "")
            since = int(start) if start not in ("", "0") else None
        except ValueError:
            raise k8s_status.bad_request("resourceVersion and timeoutSeconds must be integers")
        deadline = time.monotonic() + timeout
        http.start_chunked()
        if since is None:
            items, since = self.store.list(plural, namespace or None, predicate)
            for obj in items:
                http.write_chunk(json.dumps({"type": "ADDED", "object": obj}).encode() + b"\n")
        while time.monotonic() < deadline:
            try:
                events, revision = self.store.events_after(since, plural)
            except Gone:
                error = k8s_status.gone(since, self.store.revision).status
                http.write_chunk(json.dumps({"type": "ERROR", "object": error}).encode() + b"\n")
                break
            for _, event_type, obj in events:
                if namespace and obj["metadata"].get("namespace") != namespace:
                    continue
                if predicate(obj):
                    http.write_chunk(json.dumps({"type": event_type, "object": obj}).encode() + b"\n")
            since = revision
            self.store.wait_for_change(since, min(5.0, max(0.0, deadline - time.monotonic())))
        http.write_chunk(b"")

    # ---- writes -----------------------------------------------------------------------------

    def _do_create(self, http, request):
        if request.name:
            raise k8s_status.method_not_allowed("POST")
        obj = http.read_json()
        plural = request.resource.plural
        if not isinstance(obj, dict):
            raise k8s_status.bad_request(f"the body must be a {request.resource.kind} object")
        if obj.get("kind") not in (None, request.resource.kind):
            raise k8s_status.bad_request(f'the API version in the data ({obj.get("apiVersion")}) does not match '
                                         f'the expected API version ({request.resource.group_version})'
                                         if obj.get("kind") is None else
                                         f'{obj.get("kind")} in the body does not match {request.resource.kind}')
        prepare = k8s_objects.PREPARE.get(plural)
        if prepare is None:
            raise k8s_status.method_not_allowed("POST")
        body_namespace = (obj.get("metadata") or {}).get("namespace") if isinstance(obj.get("metadata"), dict) else None
        if body_namespace and body_namespace != request.namespace:
            raise k8s_status.bad_request("the namespace of the provided object does not match the namespace "
                                         "sent on the request")
        name = prepare(obj, request.namespace)
        if http.query.get("dryRun") == "All":
            return http.send_json(201, obj)
        try:
            created = self.store.create(plural, request.namespace, obj)
        except Conflict:
            raise k8s_status.already_exists(plural, name, request.resource.group)
        http.send_json(201, created)

    def _do_update(self, http, request):
        """PUT replaces, PATCH merges; only labels, annotations and (Jobs) parallelism change:
        the rest of a pod is immutable, as on a real server, and status is the emulator's."""
        body = http.read_json()
        if not isinstance(body, dict):
            raise k8s_status.bad_request("the body must be a JSON object")
        content_type = http.headers.get("Content-Type", "application/json").split(";")[0]
        if http.command == "PATCH" and content_type not in ("application/merge-patch+json",
                                                             "application/strategic-merge-patch+json"):
            raise k8s_status.unsupported_media_type(content_type)
        current = self._get(request)
        wanted = merge_patch(copy.deepcopy(current), body) if http.command == "PATCH" else body
        expected = (body.get("metadata") or {}).get("resourceVersion")
        if http.command == "PUT" and expected and expected != current["metadata"]["resourceVersion"]:
            raise ApiError(k8s_status.status(409, "Conflict", f'Operation cannot be fulfilled on '
                                             f'{request.resource.plural} "{request.name}": the object has been '
                                             f'modified; please apply your changes to the latest version and try again'))

        def mutate(obj):
            meta = wanted.get("metadata") or {}
            for key in ("labels", "annotations"):
                if isinstance(meta.get(key), dict):
                    obj["metadata"][key] = meta[key]
            parallelism = (wanted.get("spec") or {}).get("parallelism")
            if request.resource.plural == "jobs" and isinstance(parallelism, int) and parallelism >= 0:
                obj["spec"]["parallelism"] = parallelism
        updated = self.store.update(request.resource.plural, request.namespace, request.name, mutate)
        if updated is None:
            raise k8s_status.not_found(request.resource.plural, request.name, request.resource.group)
        http.send_json(200, updated)

    def _do_delete(self, http, request):
        options = http.read_json() or {}
        if not isinstance(options, dict):
            raise k8s_status.bad_request("DeleteOptions must be a JSON object")
        grace = options.get("gracePeriodSeconds", http.query.get("gracePeriodSeconds"))
        propagation = options.get("propagationPolicy", http.query.get("propagationPolicy")) or "Background"
        try:
            grace = None if grace in (None, "") else max(0, int(grace))
        except (TypeError, ValueError):
            raise k8s_status.bad_request("gracePeriodSeconds must be an integer")
        plural = request.resource.plural
        try:
            if plural == "pods":
                return http.send_json(200, self.nodes.delete_pod(request.namespace, request.name, grace))
            if plural == "jobs":
                job = self.jobs.delete_job(request.namespace, request.name, propagation)
            elif plural == "jobsets":
                job = self.jobsets.delete_jobset(request.namespace, request.name, propagation)
            else:
                job = self.store.delete(plural, request.namespace, request.name)
        except NotFound:
            raise k8s_status.not_found(plural, request.name, request.resource.group)
        http.send_json(200, k8s_status.success({"name": request.name, "group": request.resource.group,
                                                "kind": plural, "uid": job["metadata"]["uid"]}))

    def _review(self, http, method, request):
        if method != "POST":
            raise k8s_status.method_not_allowed(method)
        review = http.read_json()
        if not isinstance(review, dict):
            raise k8s_status.bad_request("the body must be a review object")
        if request.resource.plural == "selfsubjectaccessreviews":
            answer = k8s_auth.access_review(http.user, review)
        else:
            answer = k8s_auth.rules_review(http.user, review)
        answer.setdefault("metadata", {})["creationTimestamp"] = None
        http.send_json(201, answer)
