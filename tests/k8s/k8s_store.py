"""The object store: every object with a resourceVersion, an event log for watches.

One lock guards everything; a condition on it wakes watchers. resourceVersion is one counter
for the whole store (as etcd's revision is), so a list's resourceVersion is a point from which
a watch resumes. The event log keeps the last EVENT_LOG_SIZE events; a watch from an older
resourceVersion gets 410 Gone ("too old resource version"), as from a real server.
"""

import copy
import datetime
import threading
import uuid

EVENT_LOG_SIZE = 20000


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Conflict(Exception):
    """An object with that name exists already (409 AlreadyExists)."""


class NotFound(Exception):
    """No object of that name (404 NotFound)."""


class Gone(Exception):
    """A watch asked for a resourceVersion older than the event log (410 Expired)."""


class Store:
    def __init__(self):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.revision = 1
        self.objects = {}  # (resource, namespace, name) -> object
        self.events = []   # (revision, resource, type, object), oldest first
        self.listeners = []  # callables(resource, type, object), run under the lock

    # ---- writes ----------------------------------------------------------------------------

    def _record(self, resource, event_type, obj):
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        snapshot = copy.deepcopy(obj)
        self.events.append((self.revision, resource, event_type, snapshot))
        if len(self.events) > EVENT_LOG_SIZE:
            del self.events[: len(self.events) - EVENT_LOG_SIZE]
        self.changed.notify_all()
        for listener in list(self.listeners):
            listener(resource, event_type, snapshot)

    def create(self, resource, namespace, obj):
        with self.lock:
            meta = obj.setdefault("metadata", {})
            key = (resource, namespace, meta["name"])
            if key in self.objects:
                raise Conflict()
            if namespace:
                meta["namespace"] = namespace
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            meta.setdefault("generation", 1)
            self.objects[key] = obj
            self._record(resource, "ADDED", obj)
            return copy.deepcopy(obj)

    def update(self, resource, namespace, name, mutate):
        """Runs mutate(obj) on the stored object under the lock; records MODIFIED if it
        returns something other than False. Returns a copy, or None if the object is gone."""
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                return None
            if mutate(obj) is not False:
                self._record(resource, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def delete(self, resource, namespace, name):
        with self.lock:
            obj = self.objects.pop((resource, namespace, name), None)
            if obj is None:
                raise NotFound()
            self._record(resource, "DELETED", obj)
            return copy.deepcopy(obj)

    # ---- reads -----------------------------------------------------------------------------

    def get(self, resource, namespace, name):
        with self.lock:
            obj = self.objects.get((resource, namespace, name))
            if obj is None:
                raise NotFound()
            return copy.deepcopy(obj)

    def list(self, resource, namespace=None, predicate=None):
        """Returns (objects sorted by namespace and name, revision)."""
        with self.lock:
            found = [copy.deepcopy(obj) for (res, ns, _), obj in self.objects.items()
                     if res == resource and (namespace is None or ns == namespace)
                     and (predicate is None or predicate(obj))]
            found.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
            return found, self.revision

    def events_after(self, revision, resource):
        """(events of `resource` after `revision`, the store's revision now); raises Gone if the
        log no longer holds them."""
        with self.lock:
            if self.events and revision < self.events[0][0] - 1:
                raise Gone()
            return [(rev, kind, obj) for rev, res, kind, obj in self.events
                    if rev > revision and res == resource], self.revision

    def wait_for_change(self, revision, timeout):
        """Blocks until the store's revision passes `revision` or `timeout` seconds pass."""
        with self.lock:
            if self.revision <= revision:
                self.changed.wait(timeout)
            return self.revision
