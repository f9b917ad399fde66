"""WebSocket framing (RFC 6455), server side, as the channel.k8s.io exec protocols use it.

Every message of v4/v5.channel.k8s.io is one binary frame whose first byte is the channel:
0 stdin, 1 stdout, 2 stderr, 3 error (the exit Status as JSON), 4 resize; v5 adds the
close-stream message [255, channel] (kubectl sends [255, 0] at stdin EOF).
"""

import base64
import hashlib
import struct

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONTINUATION, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0, 1, 2, 8, 9, 10
MAX_FRAME = 64 << 20  # a client frame larger than this ends the session (protocol error)


class ProtocolError(Exception):
    pass


def accept_key(client_key):
    return base64.b64encode(hashlib.sha1((client_key + GUID).encode()).digest()).decode()


def frame(opcode, payload):
    """One unmasked, unfragmented server frame."""
    head = bytes([0x80 | opcode])
    length = len(payload)
    if length < 126:
        head += bytes([length])
    elif length < 1 << 16:
        head += bytes([126]) + struct.pack("!H", length)
    else:
        head += bytes([127]) + struct.pack("!Q", length)
    return head + payload


def close_frame(code=1000, reason=b""):
    return frame(OP_CLOSE, struct.pack("!H", code) + reason)


class FrameParser:
    """Feeds on bytes from the client; yields (opcode, payload) of complete messages
    (continuation frames joined; control frames as they come)."""

    def __init__(self):
        self.buffer = bytearray()
        self.fragments = None  # (opcode, [payloads]) of a message in progress

    def feed(self, data):
        self.buffer += data
        messages = []
        while True:
            parsed = self._one_frame()
            if parsed is None:
                return messages
            fin, opcode, payload = parsed
            if opcode >= OP_CLOSE:
                messages.append((opcode, payload))
            elif opcode == OP_CONTINUATION:
                if self.fragments is None:
                    raise ProtocolError("continuation frame without a message")
                self.fragments[1].append(payload)
                if fin:
                    messages.append((self.fragments[0], b"".join(self.fragments[1])))
                    self.fragments = None
            elif fin:
                messages.append((opcode, payload))
            else:
                self.fragments = (opcode, [payload])

    def _one_frame(self):
        buffer = self.buffer
        if len(buffer) < 2:
            return None
        fin, opcode = buffer[0] & 0x80, buffer[0] & 0x0F
        masked, length = buffer[1] & 0x80, buffer[1] & 0x7F
        offset = 2
        if length == 126:
            if len(buffer) < 4:
                return None
            length, offset = struct.unpack_from("!H", buffer, 2)[0], 4
        elif length == 127:
            if len(buffer) < 10:
                return None
            length, offset = struct.unpack_from("!Q", buffer, 2)[0], 10
        if length > MAX_FRAME:
            raise ProtocolError(f"frame of {length} bytes")
        if not masked:
            raise ProtocolError("client frame not masked")
        if len(buffer) < offset + 4 + length:
            return None
        mask = bytes(buffer[offset:offset + 4])
        payload = bytes(buffer[offset + 4:offset + 4 + length])
        del buffer[:offset + 4 + length]
        return bool(fin), opcode, unmask(payload, mask)


def unmask(payload, mask):
    # XOR with the 4-byte key repeated, done as one big integer operation (fast in CPython).
    if not payload:
        return payload
    key = (mask * (len(payload) // 4 + 1))[:len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(key, "big")).to_bytes(len(payload), "big")
