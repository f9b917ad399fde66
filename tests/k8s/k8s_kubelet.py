"""Container processes: how a pod's containers run on a node (a testcluster host).

Each container is one process tree entered into the host's network, UTS and mount namespaces
(nsenter on the host's sshd, as `testcluster.sh exec H` does) and into a NEW pid namespace of
its own (unshare --pid --fork --kill-child --mount-proc: a /proc of that namespace, as a real
container has; with the host's /proc, a pid read there is another process than the same number
in the pod, and the agent's process-tree scan would name strangers), whose init is the
container's command. When that
init dies the kernel kills every process in the namespace, so ending a pod (SIGKILL of the init)
ends everything in it, including what `kubectl exec` started there (exec enters the same pid
namespace with nsenter -p). Because the processes live in the host's network namespace,
`testcluster.sh kill H` and `down` end them like any other process of the host.
"""

import os
import signal
import subprocess
import time


class ContainerProcess:
    """One running container: the unshare wrapper we spawned and the container's init (its
    pid as the root pid namespace sees it, which is what /proc on the machine shows)."""

    def __init__(self, name, wrapper, init_pid, env, log_path):
        self.name = name
        self.wrapper = wrapper
        self.init_pid = init_pid
        self.env = env
        self.log_path = log_path

    def signal(self, signum):
        try:
            os.kill(self.init_pid, signum)
        except ProcessLookupError:
            pass

    def wait(self):
        """Waits for the container to end; returns its exit code (128+N for signal N)."""
        code = self.wrapper.wait()
        return 128 - code if code < 0 else code


def container_env(pod, container, node_ip):
    """The container's environment: a base PATH, HOSTNAME, env values and the fieldRef values
    the contract lists. Secret/ConfigMap references are not emulated (left empty)."""
    meta, spec = pod["metadata"], pod["spec"]
    env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
           "HOSTNAME": spec.get("hostname") or meta["name"],
           "HOME": "/root"}
    fields = {"metadata.name": meta["name"], "metadata.namespace": meta.get("namespace", ""),
              "metadata.uid": meta.get("uid", ""), "spec.nodeName": spec.get("nodeName", ""),
              "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
              "status.podIP": node_ip, "status.hostIP": node_ip}
    for item in container.get("env") or []:
        name = item.get("name")
        if not name:
            continue
        if "value" in item:
            env[name] = str(item["value"])
            continue
        path = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
        env[name] = field_ref(meta, fields, path)
    return env


def field_ref(meta, fields, path):
    for prefix, source in (("metadata.labels['", "labels"), ("metadata.annotations['", "annotations")):
        if path.startswith(prefix) and path.endswith("']"):
            return (meta.get(source) or {}).get(path[len(prefix):-2], "")
    return fields.get(path, "")


def container_argv(container):
    """command + args. Images do not exist here: a container without a command runs
    `sleep infinity`, like a pause container, so that it holds its slot."""
    argv = list(container.get("command") or []) + list(container.get("args") or [])
    return argv or ["sleep", "infinity"]


def _children(pid):
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as handle:
            return [int(p) for p in handle.read().split()]
    except (FileNotFoundError, ProcessLookupError, ValueError):
        return []


def start_container(host_pid, pod, container, node_ip, log_dir):
    """Starts the container on the host whose sshd is host_pid. Returns a ContainerProcess, or
    raises OSError with the reason it could not start."""
    env = container_env(pod, container, node_ip)
    meta = pod["metadata"]
    log_path = os.path.join(log_dir, f"{meta.get('namespace', '')}_{meta['name']}_{container['name']}.log")
    workdir = container.get("workingDir") or "/"
    # The init holds on a pipe until its pid is known here, then execs the container's command:
    # a command that ends at once (`true`) used to be gone before the wrapper's child could be
    # seen, and a container that had run was reported as one that could not start (StartError).
    release_read, release_write = os.pipe()
    command = container_argv(container)
    # The pipe is the init's stdin until then (dash redirects only fds 0-9), /dev/null after.
    hold = 'read -r _ || exit 126; exec </dev/null; exec "$@"'
    argv = ["nsenter", "-t", str(host_pid), "-n", "-u", "-m", f"--wd={workdir}", "--",
            "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", "--",
            "sh", "-c", hold, command[0]] + command
    try:
        with open(log_path, "ab") as log:
            wrapper = subprocess.Popen(argv, stdin=release_read, stdout=log, stderr=log, env=env,
                                       close_fds=True, start_new_session=True)
    except OSError:
        os.close(release_write)
        raise
    finally:
        os.close(release_read)
    with os.fdopen(release_write, "wb", buffering=0) as release:
        # The container's init is the wrapper's child once unshare has forked (milliseconds).
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            children = _children(wrapper.pid)
            if children:
                try:
                    release.write(b"go\n")
                except BrokenPipeError:
                    break  # the init died before its release: it never ran the command
                return ContainerProcess(container["name"], wrapper, children[0], env, log_path)
            if wrapper.poll() is not None:
                break
            time.sleep(0.005)
    if wrapper.poll() is None:
        wrapper.kill()
    wrapper.wait()
    raise OSError(f"container {container['name']} did not start (exit {wrapper.returncode}); see {log_path}")


def exec_argv(container_process, command):
    """The argv that runs `command` inside the container: its pid namespace (nsenter forks into
    it) and, through the init's namespaces, the host's network, UTS and mounts."""
    return ["nsenter", "-t", str(container_process.init_pid), "-p", "-n", "-u", "-m",
            "--wd=/", "--"] + list(command)


def kill_container(container_process, grace_seconds, is_gone=None):
    """SIGTERM to the container's init, then after grace_seconds SIGKILL (which ends its whole
    pid namespace). Returns once the wrapper has been reaped."""
    container_process.signal(signal.SIGTERM)
    deadline = time.monotonic() + max(0, grace_seconds)
    while time.monotonic() < deadline:
        if container_process.wrapper.poll() is not None:
            return
        time.sleep(0.05)
    container_process.signal(signal.SIGKILL)
    try:
        container_process.wrapper.wait(timeout=10)
    except subprocess.TimeoutExpired:
        container_process.wrapper.kill()
