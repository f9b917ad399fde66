"""Label and field selectors as the API server parses them (labelSelector=, fieldSelector=).

A bad selector raises SelectorError, which the server answers with 400 BadRequest, as a real
API server does (`unable to parse requirement: ...`).
"""

import re


class SelectorError(ValueError):
    pass


# key: an optional DNS-subdomain prefix and a name, as in labels.
_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET_OPS = re.compile(r"^(" + _KEY + r")\s+(in|notin)\s+\((.*)\)$")
_EQUALITY_OPS = re.compile(r"^(" + _KEY + r")\s*(==|=|!=)\s*(.*)$")


def _split_terms(text):
    """Splits a selector at commas that are not inside parentheses."""
    terms, depth, current = [], 0, []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced parentheses in selector {text!r}")
        if char == "," and depth == 0:
            terms.append("".join(current).strip())
            current = []
        else:
            current.append(char)
    if depth != 0:
        raise SelectorError(f"unbalanced parentheses in selector {text!r}")
    terms.append("".join(current).strip())
    return [term for term in terms if term]


def _check_value(value, term):
    if not re.fullmatch(_VALUE, value) or len(value) > 63:
        raise SelectorError(f"unable to parse requirement: invalid label value: {value!r} in {term!r}")
    return value


def parse_label_selector(text):
    """Returns a list of (key, operator, values) requirements; operator is one of
    '=', '!=', 'in', 'notin', 'exists', '!exists'."""
    requirements = []
    for term in _split_terms(text or ""):
        match = _SET_OPS.match(term)
        if match:
            key, operator, values = match.group(1), match.group(3), match.group(4)
            parsed = [_check_value(v.strip(), term) for v in values.split(",")]
            requirements.append((key, operator, parsed))
            continue
        match = _EQUALITY_OPS.match(term)
        if match:
            key, operator, value = match.group(1), match.group(3), match.group(4).strip()
            operator = "=" if operator == "==" else operator
            requirements.append((key, operator, [_check_value(value, term)]))
            continue
        if term.startswith("!") and re.fullmatch(_KEY, term[1:].strip()):
            requirements.append((term[1:].strip(), "!exists", []))
            continue
        if re.fullmatch(_KEY, term):
            requirements.append((term, "exists", []))
            continue
        raise SelectorError(f"unable to parse requirement: {term!r} is not a valid label selector term")
    return requirements


def labels_match(requirements, labels):
    labels = labels or {}
    for key, operator, values in requirements:
        present = key in labels
        value = labels.get(key)
        if operator == "=" and value != values[0]:
            return False
        if operator == "!=" and value == values[0]:
            return False
        if operator == "in" and value not in values:
            return False
        if operator == "notin" and present and value in values:
            return False
        if operator == "exists" and not present:
            return False
        if operator == "!exists" and present:
            return False
    return True


# The fields a real API server lets you select on, per resource (the common ones).
SELECTABLE_FIELDS = {
    "pods": ("metadata.name", "metadata.namespace", "spec.nodeName", "status.phase",
             "spec.restartPolicy", "status.podIP"),
    "jobs": ("metadata.name", "metadata.namespace", "status.successful"),
    "services": ("metadata.name", "metadata.namespace"),
    "nodes": ("metadata.name", "spec.unschedulable"),
    "namespaces": ("metadata.name", "status.phase"),
}


def parse_field_selector(text, resource):
    """Returns a list of (path, operator, value); operator '=' or '!='."""
    allowed = SELECTABLE_FIELDS.get(resource, ("metadata.name", "metadata.namespace"))
    requirements = []
    for term in _split_terms(text or ""):
        match = re.fullmatch(r"([A-Za-z.]+)\s*(==|=|!=)\s*(.*)", term)
        if not match:
            raise SelectorError(f"invalid selector: {term!r}; can't understand it")
        path, operator, value = match.group(1), match.group(2), match.group(3).strip()
        if path not in allowed:
            raise SelectorError(f'field label not supported: {path}')
        requirements.append((path, "!=" if operator == "!=" else "=", value))
    return requirements


def field_value(obj, path):
    node = obj
    for part in path.split("."):
        if not isinstance(node, dict):
            return ""
        node = node.get(part)
    return "" if node is None else str(node)


def fields_match(requirements, obj):
    for path, operator, value in requirements:
        actual = field_value(obj, path)
        if (actual == value) != (operator == "="):
            return False
    return True
