"""The protobuf request bodies kubectl's typed clients send (Content-Type
application/vnd.kubernetes.protobuf): only the access reviews of `kubectl auth can-i`.

The wire form is "k8s\\0" + runtime.Unknown{typeMeta{apiVersion, kind}, raw}, raw being the
object's own message. Other kinds are answered with 415, so a new client that sends one shows
up in the tests instead of being misread.
"""

MAGIC = b"k8s\x00"


class ProtoError(ValueError):
    pass


def _varint(data, pos):
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtoError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ProtoError("varint too long")


def fields(data):
    """{field number: [values]}; length-delimited values are bytes, varints ints."""
    out, pos = {}, 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 2:
            length, pos = _varint(data, pos)
            if pos + length > len(data):
                raise ProtoError("truncated field")
            value, pos = data[pos:pos + length], pos + length
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ProtoError(f"unsupported wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _text(message, number):
    values = message.get(number)
    return values[-1].decode("utf-8", "replace") if values else ""


def _attributes(raw, names):
    message = fields(raw)
    return {name: _text(message, i + 1) for i, name in enumerate(names) if _text(message, i + 1)}


RESOURCE_ATTRIBUTES = ("namespace", "verb", "group", "version", "resource", "subresource", "name")


def decode(body):
    """Returns the JSON form of a protobuf-encoded access review, or raises ProtoError."""
    if not body.startswith(MAGIC):
        raise ProtoError("no k8s protobuf magic")
    unknown = fields(body[len(MAGIC):])
    type_meta = fields(unknown.get(1, [b""])[-1])
    api_version, kind = _text(type_meta, 1), _text(type_meta, 2)
    raw = fields(unknown.get(2, [b""])[-1])
    spec = fields(raw.get(2, [b""])[-1])
    if kind == "SelfSubjectAccessReview":
        body = {"apiVersion": api_version, "kind": kind, "spec": {}}
        if 1 in spec:
            body["spec"]["resourceAttributes"] = _attributes(spec[1][-1], RESOURCE_ATTRIBUTES)
        if 2 in spec:
            body["spec"]["nonResourceAttributes"] = _attributes(spec[2][-1], ("path", "verb"))
        return body
    if kind == "SelfSubjectRulesReview":
        return {"apiVersion": api_version, "kind": kind, "spec": {"namespace": _text(spec, 1)}}
    raise ProtoError(f"protobuf bodies of kind {kind!r} are not supported by the emulator")
