"""metav1.Status bodies with the messages and reasons a real API server gives."""


class ApiError(Exception):
    """Raised by handlers; the server answers with status.code and this Status body."""

    def __init__(self, status):
        super().__init__(status.get("message", ""))
        self.status = status


def status(code, reason, message, details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}
    if details is not None:
        body["details"] = details
    return body


def success(details=None):
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    return body


def _group_details(name, plural, group):
    details = {"kind": plural}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    return details


def not_found(plural, name, group=""):
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(status(404, "NotFound", f'{qualified} "{name}" not found',
                           _group_details(name, plural, group)))


def already_exists(plural, name, group=""):
    qualified = f"{plural}.{group}" if group else plural
    return ApiError(status(409, "AlreadyExists", f'{qualified} "{name}" already exists',
                           _group_details(name, plural, group)))


def forbidden(user, verb, plural, subresource, name, namespace, group=""):
    qualified = f"{plural}.{group}" if group else plural
    target = f'{qualified} "{name}"' if name else qualified
    resource = f"{plural}/{subresource}" if subresource else plural
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (f'{target} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
               f'in API group "{group}" {scope}')
    return ApiError(status(403, "Forbidden", message, _group_details(name, plural, group)))


def unauthorized():
    return ApiError(status(401, "Unauthorized", "Unauthorized"))


def bad_request(message):
    return ApiError(status(400, "BadRequest", message))


def invalid(kind, name, causes, group=""):
    """causes: [(field, reason, message)], e.g. ("spec.containers", "FieldValueRequired",
    "Required value")."""
    summary = ", ".join(f"{f}: {m}" for f, _, m in causes)
    qualified = f"{kind}.{group}" if group else kind
    details = {"name": name, "kind": kind,
               "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}
    if group:
        details["group"] = group
    return ApiError(status(422, "Invalid", f'{qualified} "{name}" is invalid: {summary}', details))


def method_not_allowed(method):
    return ApiError(status(405, "MethodNotAllowed",
                           f"the server does not allow this method on the requested resource ({method})"))


def gone(requested, current):
    return ApiError(status(410, "Expired", f"too old resource version: {requested} ({current})"))


def unsupported_media_type(content_type):
    return ApiError(status(415, "UnsupportedMediaType",
                           f'the body of the request was in an unknown format - accepted media types '
                           f'include: application/json, application/merge-patch+json, '
                           f'application/strategic-merge-patch+json (got "{content_type}")'))
