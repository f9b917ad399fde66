#!/usr/bin/python3
"""The emulated Kubernetes cluster, driven by the real kubectl (issue 31 item 4).

Brings up `testcluster.sh up 3 --kubernetes`, then `up 2 --kubernetes --kube-jobset-crd` for the
JobSet checks, with a prefix of its own ("t<pid>k", the convention of
tests/integration/cluster_fixture.h, whose stale-cluster cleanup then covers it), runs kubectl in
the control namespace, and always tears each cluster down. Exits 77 printing
"skipped: <reason>" where it cannot run (not root, no ip netns, no kubectl).
"""

import hashlib
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TESTCLUSTER = os.path.join(REPO, "scripts", "testcluster.sh")
PREFIX = f"t{os.getpid()}k"
STATE = os.path.join(os.environ.get("DTRAIN_TESTCLUSTER_ROOT", "/tmp/dtrain-testcluster"), PREFIX)
ENV = dict(os.environ, DTRAIN_TESTCLUSTER_PREFIX=PREFIX)


def skip(reason):
    print(f"skipped: {reason}")
    sys.exit(77)


def testcluster(*args, check=True):
    result = subprocess.run([TESTCLUSTER, *args], env=ENV, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise AssertionError(f"testcluster.sh {' '.join(args)}: exit {result.returncode}: {result.stderr}")
    return result


def kubectl(*args, context=None, stdin=None, check=True, timeout=30):
    """Runs the real kubectl in the control namespace; returns the CompletedProcess (bytes)."""
    argv = ["ip", "netns", "exec", f"{PREFIX}-ctl", "kubectl", "--kubeconfig", f"{STATE}/kube/kubeconfig",
            "--cache-dir", f"{STATE}/kube/kubectl-cache"]
    if context:
        argv += ["--context", context]
    result = subprocess.run(argv + list(args), input=stdin, capture_output=True, timeout=timeout)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)}: exit {result.returncode}: {result.stderr.decode()}")
    return result


def create(obj):
    return kubectl("create", "-f", "-", stdin=json.dumps(obj).encode())


def get(kind, name):
    return json.loads(kubectl("get", kind, name, "-o", "json").stdout)


def wait_for(what, predicate, timeout=10.0, describe=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}" + (f": {describe()}" if describe else ""))


def pod(name, command, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"test": "emulator"}},
            "spec": dict({"restartPolicy": "Never", "terminationGracePeriodSeconds": 2,
                          "containers": [{"name": "main", "image": "none", "command": command}]}, **spec)}


POD_PIDS = []  # every pod process the test saw: none may outlive `down`


def main_pid(name):
    status = get("pod", name)["status"]["containerStatuses"][0]
    pid = int(status["containerID"].removeprefix("emulator://"))
    POD_PIDS.append(pid)
    return pid


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            stat = handle.read()
        return stat[stat.rindex(")") + 2] not in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return False


def pod_phase(name):
    result = kubectl("get", "pod", name, "-o", "json", check=False)
    return json.loads(result.stdout)["status"].get("phase") if result.returncode == 0 else None


# ---- the checks --------------------------------------------------------------------------------

def check_pod_runs_on_a_host():
    create(pod("one", ["sleep", "infinity"]))
    wait_for("pod one Running", lambda: pod_phase("one") == "Running")
    obj = get("pod", "one")
    hosts = {f"10.77.0.{10 + i}" for i in (1, 2, 3)}
    assert obj["status"]["podIP"] in hosts and obj["status"]["podIP"] == obj["status"]["hostIP"], obj["status"]
    main_pid("one")
    print(f"ok: pod one Running on {obj['spec']['nodeName']} with IP {obj['status']['podIP']}")


def check_exec():
    data = os.urandom(8 << 20)
    result = kubectl("exec", "-i", "one", "-c", "main", "--", "cat", stdin=data, timeout=60)
    assert hashlib.sha256(result.stdout).hexdigest() == hashlib.sha256(data).hexdigest(), \
        f"8 MB round trip: got {len(result.stdout)} bytes back"
    result = kubectl("exec", "-i", "one", "--", "sh", "-c", "wc -c; exit 7", stdin=b"x" * 1000, check=False)
    assert result.returncode == 7 and result.stdout.strip() == b"1000", (result.returncode, result.stdout)
    print("ok: exec -i round-trips 8 MB byte-exact; stdin EOF ends wc; exit 7 is kubectl's exit code")


def check_watch_and_delete_end_processes():
    watch = subprocess.Popen(["ip", "netns", "exec", f"{PREFIX}-ctl", "kubectl", "--kubeconfig",
                              f"{STATE}/kube/kubeconfig", "--cache-dir", f"{STATE}/kube/kubectl-cache",
                              "get", "pods", "-l", "test=emulator", "-w", "--output-watch-events", "-o", "json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        create(pod("two", ["sleep", "infinity"]))
        wait_for("pod two Running", lambda: pod_phase("two") == "Running")
        # A process started by exec, in the background (its pid on the machine comes back).
        out = kubectl("exec", "two", "--", "sh", "-c", "sleep 1002 >/dev/null 2>&1 & echo started").stdout
        assert out.strip() == b"started", out
        main = main_pid("two")
        exec_child = wait_for("the exec'd sleep", lambda: [int(p) for p in os.listdir("/proc") if p.isdigit()
                                                          and _cmdline(p) == "sleep 1002"])
        POD_PIDS.extend(exec_child)
        kubectl("delete", "pod", "two", "--grace-period=1", "--wait=true", timeout=30)
        wait_for("pod two's processes to end", lambda: not alive(main) and not any(alive(p) for p in exec_child))
    finally:
        time.sleep(0.3)
        watch.terminate()
        stdout, _ = watch.communicate(timeout=10)
    events = [(e["type"], e["object"]["metadata"]["name"]) for e in _json_stream(stdout.decode())]
    for wanted in (("ADDED", "two"), ("MODIFIED", "two"), ("DELETED", "two")):
        assert wanted in events, f"watch saw {events}"
    print("ok: watch saw ADDED/MODIFIED/DELETED; deleting the pod ended its main process and the exec'd one")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _json_stream(text):
    decoder, index, out = json.JSONDecoder(), 0, []
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        obj, index = decoder.raw_decode(text, index)
        out.append(obj)
    return out


def check_indexed_job():
    template = pod("unused", ["sleep", "infinity"])
    template["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
           "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3,
                    "template": {"metadata": {"labels": {"app": "train"}}, "spec": template["spec"]}}}
    create(job)

    def running_pods():
        items = json.loads(kubectl("get", "pods", "-l", "batch.kubernetes.io/job-name=train", "-o", "json").stdout)["items"]
        return items if len(items) == 3 and all(p["status"].get("phase") == "Running" for p in items) else None
    def phases():
        items = json.loads(kubectl("get", "pods", "-o", "json", check=False).stdout or b'{"items": []}')["items"]
        return "; ".join(f'{p["metadata"]["name"]}: {p["status"].get("phase")} {p["status"].get("message", "")}'
                         for p in items)
    pods = wait_for("3 running job pods", running_pods, describe=phases)
    POD_PIDS.extend(int(p["status"]["containerStatuses"][0]["containerID"].removeprefix("emulator://"))
                    for p in pods)
    indexes = sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    nodes = {p["spec"]["nodeName"] for p in pods}
    assert indexes == ["0", "1", "2"] and len(nodes) == 3, (indexes, nodes)
    kubectl("delete", "job", "train", "--cascade=background", "--wait=false")
    wait_for("the job's pods to go", lambda: not json.loads(kubectl(
        "get", "pods", "-l", "batch.kubernetes.io/job-name=train", "-o", "json").stdout)["items"], timeout=15)
    print(f"ok: Indexed Job of 3 made pods 0..2 on {sorted(nodes)}; deleting the job deleted them")


def check_job_failure_policies():
    """backoffLimit 0: one lost pod fails the Job and its other pods are deleted. backoffLimitPerIndex 0
    with maxFailedIndexes = completions: the lost pod's index fails alone, gets no new pod, and
    the other pods run on (what dtrain's kubernetes.job asks for)."""
    def job(name, **limits):
        template = pod("unused", ["sleep", "infinity"])
        return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
                "spec": {"completionMode": "Indexed", "completions": 3, "parallelism": 3, **limits,
                         "template": {"metadata": {"labels": {"app": name}}, "spec": template["spec"]}}}

    def pods_of(name):
        return json.loads(kubectl("get", "pods", "-l", f"batch.kubernetes.io/job-name={name}", "-o", "json").stdout)["items"]

    def running(name):
        items = [p for p in pods_of(name) if not p["metadata"].get("deletionTimestamp")]
        return items if len(items) == 3 and all(p["status"].get("phase") == "Running" for p in items) else None

    def condition(name):
        for c in get("job", name)["status"].get("conditions", []):
            if c["status"] == "True":
                return c
        return None

    for name, limits in (("whole", {"backoffLimit": 0}),
                         ("per-index", {"backoffLimitPerIndex": 0, "maxFailedIndexes": 3})):
        create(job(name, **limits))
        pods = wait_for(f"3 running pods of {name}", lambda: running(name))
        victim = next(p for p in pods if p["metadata"]["labels"][
            "batch.kubernetes.io/job-completion-index"] == "1")["metadata"]["name"]
        kubectl("delete", "pod", victim, "--grace-period=1", "--wait=false")
        if name == "whole":
            failed = wait_for("the job to fail", lambda: condition(name), timeout=15)
            assert failed["type"] == "Failed" and failed["reason"] == "BackoffLimitExceeded", failed
            wait_for("its other pods to go", lambda: not pods_of(name), timeout=20)
        else:
            wait_for("index 1 to fail", lambda: get("job", name)["status"].get("failedIndexes") == "1", timeout=15)
            wait_for("the lost pod to go", lambda: victim not in [p["metadata"]["name"] for p in pods_of(name)],
                     timeout=15)
            left = pods_of(name)
            indexes = sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in left)
            assert indexes == ["0", "2"], indexes  # no new pod for index 1
            assert all(p["status"]["phase"] == "Running" for p in left), left
            assert condition(name) is None, condition(name)
        kubectl("delete", "job", name, "--cascade=background", "--wait=false")
        wait_for(f"{name}'s pods to go", lambda: not pods_of(name), timeout=20)
    print("ok: backoffLimit 0 fails the Job on one lost pod and deletes the rest; "
          "backoffLimitPerIndex 0 fails only that index, the other pods run on")


def check_no_exec_context():
    result = kubectl("exec", "one", "--", "true", context="no-exec", check=False)
    wanted = (b'pods "one" is forbidden: User "no-exec" cannot create resource "pods/exec" '
              b'in API group "" in the namespace "dtrain-test"')
    assert result.returncode != 0 and wanted in result.stderr, result.stderr
    result = kubectl("auth", "can-i", "create", "pods", "--subresource=exec", context="no-exec", check=False)
    assert result.returncode == 1 and result.stdout.startswith(b"no"), (result.returncode, result.stdout)
    result = kubectl("auth", "can-i", "create", "pods", "--subresource=exec", check=False)
    assert result.returncode == 0 and result.stdout.strip() == b"yes", result.stdout
    print("ok: context no-exec: exec is forbidden with the API server's message; auth can-i says no")


def check_killed_host_is_not_ready():
    node = get("pod", "one")["spec"]["nodeName"]
    testcluster("kill", node)
    started = time.monotonic()

    def not_ready():
        conditions = get("node", node)["status"]["conditions"]
        return any(c["type"] == "Ready" and c["status"] != "True" for c in conditions)
    wait_for(f"node {node} NotReady", not_ready, timeout=5)
    print(f"ok: kill {node} -> node NotReady after {time.monotonic() - started:.1f} s")


def check_no_jobsets_without_crd():
    """Without the JobSet CRD, as on a real server without it: no group in discovery, its paths
    are 404, and kubectl cannot create a JobSet."""
    listed = kubectl("api-resources", "--api-group=jobset.x-k8s.io", "-o", "name")
    assert listed.stdout.decode().strip() == "", listed.stdout
    raw = kubectl("get", "--raw", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/dtrain-test/jobsets", check=False)
    assert raw.returncode != 0 and b"NotFound" in raw.stderr, (raw.returncode, raw.stderr)
    # --validate=false: kubectl's schema check would fail first, on the OpenAPI v2 fallback that
    # the emulator does not serve; what is checked here is kubectl's mapping of the kind.
    made = kubectl("create", "--validate=false", "-f", "-", check=False,
                   stdin=json.dumps(jobset("none", 1, ["sleep", "infinity"])).encode())
    assert made.returncode != 0 and b'no matches for kind "JobSet"' in made.stderr, made.stderr
    print("ok: without the CRD: no jobset.x-k8s.io in discovery, its path is 404, kubectl create refuses a JobSet")


def jobset(name, pods, command, **job_spec):
    """A JobSet of one replicatedJob `workers` (1 replica) of an Indexed Job of `pods` pods."""
    template = pod("unused", command)
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name, "labels": {"test": "jobset"}},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 1, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": dict({"completionMode": "Indexed", "completions": pods, "parallelism": pods},
                             **job_spec,
                             template={"metadata": {"labels": {"app": name}}, "spec": template["spec"]})}}],
                     "failurePolicy": {"maxRestarts": 0}}}


def check_jobset_crd():
    """With the CRD (--kube-jobset-crd): discovery lists it, kubectl creates a JobSet; its child
    Job, the Job's pods (hostnames <jobset>-<replicatedJob>-<jobIndex>-<podIndex>, the subdomain,
    the JobSet's labels) and the headless Service appear, and deleting the JobSet deletes them all."""
    listed = kubectl("api-resources", "--api-group=jobset.x-k8s.io", "-o", "name")
    assert listed.stdout.decode().split() == ["jobsets.jobset.x-k8s.io"], listed.stdout
    wanted = jobset("train", 2, ["sleep", "infinity"], backoffLimitPerIndex=0, maxFailedIndexes=2)
    wanted["spec"]["network"] = {"enableDNSHostnames": True, "subdomain": "trainnet"}
    create(wanted)
    job = wait_for("the child Job", lambda: json.loads(kubectl("get", "jobs", "-l", "jobset.sigs.k8s.io/jobset-name=train",
                                                               "-o", "json").stdout)["items"])
    assert [j["metadata"]["name"] for j in job] == ["train-workers-0"], job
    owner = job[0]["metadata"]["ownerReferences"][0]
    uid = get("jobset", "train")["metadata"]["uid"]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("JobSet", "train", uid, True), owner
    labels = job[0]["metadata"]["labels"]
    assert (labels["jobset.sigs.k8s.io/replicatedjob-name"], labels["jobset.sigs.k8s.io/job-index"],
            labels["app"]) == ("workers", "0", "train"), labels

    def running_pods():
        items = json.loads(kubectl("get", "pods", "-l", "jobset.sigs.k8s.io/jobset-name=train", "-o", "json").stdout)["items"]
        return items if len(items) == 2 and all(p["status"].get("phase") == "Running" for p in items) else None
    pods = sorted(wait_for("2 running pods of the JobSet", running_pods), key=lambda p: p["spec"]["hostname"])
    POD_PIDS.extend(int(p["status"]["containerStatuses"][0]["containerID"].removeprefix("emulator://")) for p in pods)
    assert [p["spec"]["hostname"] for p in pods] == ["train-workers-0-0", "train-workers-0-1"], pods
    assert all(p["spec"]["subdomain"] == "trainnet" and p["metadata"]["labels"]["app"] == "train"
               and p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] == "workers" for p in pods), pods
    service = get("service", "trainnet")
    assert service["spec"]["clusterIP"] == "None", service["spec"]
    assert service["spec"]["selector"] == {"jobset.sigs.k8s.io/jobset-name": "train"}, service["spec"]
    assert service["metadata"]["ownerReferences"][0]["uid"] == uid, service["metadata"]
    status = wait_for("replicatedJobsStatus", lambda: get("jobset", "train")["status"].get("replicatedJobsStatus"))
    assert status[0]["name"] == "workers" and status[0]["active"] == 1, status
    by_label = json.loads(kubectl("get", "jobsets", "-l", "test=jobset", "-o", "json").stdout)["items"]
    assert [j["metadata"]["name"] for j in by_label] == ["train"], by_label

    kubectl("delete", "jobset", "train", "--cascade=background", "--wait=false")

    def all_gone():
        left = kubectl("get", "jobsets,jobs,services,pods", "-o", "name").stdout.decode().split()
        return not [name for name in left if "train" in name]
    wait_for("the JobSet's Job, Service and pods to go", all_gone, timeout=20)
    wait_for("the JobSet's pod processes to end", lambda: not any(alive(p) for p in POD_PIDS[-2:]))
    print("ok: JobSet train made Job train-workers-0 (owned, labelled), pods train-workers-0-{0,1} in subdomain "
          "trainnet and headless Service trainnet; deleting the JobSet deleted all of them and ended the processes")


def check_jobset_validation_and_status():
    """422 with causes for what a JobSet lacks; Completed when its Jobs complete, Failed when one fails."""
    for name, spec, cause in (("nojobs", {}, "spec.replicatedJobs: Required value"),
                              ("notemplate", {"replicatedJobs": [{"name": "w"}]},
                               "spec.replicatedJobs[0].template: Required value")):
        made = kubectl("create", "-f", "-", check=False, stdin=json.dumps(
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
             "spec": spec}).encode())
        assert made.returncode != 0 and f'The JobSet "{name}" is invalid: {cause}'.encode() in made.stderr, made.stderr
    create(jobset("done", 1, ["true"]))
    create(jobset("broken", 1, ["false"], backoffLimit=0))

    def terminal(name):
        return get("jobset", name)["status"].get("terminalState")
    # Deadlines against a hang, not timings: the first full-suite minute (fuzz replays, builds of
    # other tests' pods) once made the JobSet's pod take longer than 15 s to run `true`.
    def state_of(name):
        pods = kubectl("get", "pods", "-o", "json", check=False).stdout
        return json.dumps(get("jobset", name).get("status")) + " pods: " + pods.decode(errors="replace")[:3000]
    wait_for("JobSet done to complete", lambda: terminal("done") == "Completed", timeout=60,
             describe=lambda: state_of("done"))
    wait_for("JobSet broken to fail", lambda: terminal("broken") == "Failed", timeout=60)
    failed = [c for c in get("jobset", "broken")["status"]["conditions"] if c["type"] == "Failed"]
    assert failed and failed[0]["reason"] == "FailedJobs", failed
    for name in ("done", "broken"):
        kubectl("delete", "jobset", name, "--wait=false")
    wait_for("their Jobs to go", lambda: not kubectl("get", "jobs", "-o", "name").stdout.strip(), timeout=60)
    print("ok: a JobSet without replicatedJobs or a template gets 422 with the cause; "
          "Completed when its Job completes, Failed (FailedJobs) when it fails")


def check_requests_recorded():
    requests = sum(1 for _ in open(f"{STATE}/kube/requests.jsonl"))
    assert "Bearer" not in open(f"{STATE}/kube/requests.jsonl").read()
    print(f"ok: {requests} requests recorded in requests.jsonl, no token in it")


def keep_artefacts(prefix):
    artefacts = os.environ.get("DTRAIN_TEST_ARTEFACTS")
    if artefacts and os.path.exists(f"{STATE}/kube/requests.jsonl"):
        os.makedirs(artefacts, exist_ok=True)
        for name in ("requests.jsonl", "apiserver.log"):
            subprocess.run(["cp", f"{STATE}/kube/{name}", os.path.join(artefacts, prefix + name)])


def check_nothing_left():
    output = testcluster("down").stdout
    leftover = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}-" not in leftover, leftover
    strays = [pid for pid in POD_PIDS if alive(pid)]
    assert not strays, f"pod processes left: {strays}"
    print("ok: down left no namespace and no pod process" + (f" ({output.strip()})" if output.strip() else ""))


def kubectl_too_old():
    """Why this kubectl cannot exec into the emulator, or "": it speaks WebSocket exec only from
    1.30 on (Debian's kubernetes-client 1.20 speaks SPDY, which the emulator does not)."""
    result = subprocess.run(["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True)
    try:
        version = json.loads(result.stdout)["clientVersion"]
        major, minor = int(version["major"]), int(version["minor"].rstrip("+"))
    except (ValueError, KeyError, TypeError):
        return "cannot read `kubectl version --client -o json`: " + (result.stderr.strip() or result.stdout[:200])
    if (major, minor) < (1, 30):
        return (f"kubectl {major}.{minor} execs over SPDY only; the emulated API server speaks WebSocket "
                "exec (kubectl 1.30 or newer)")
    return ""


def main():
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    if subprocess.run(["sh", "-c", "command -v kubectl"], capture_output=True).returncode != 0:
        skip("no kubectl; scripts/setup.sh --tests installs it")
    too_old = kubectl_too_old()
    if too_old:
        skip(too_old)
    result = testcluster("up", "3", "--kubernetes", check=False)
    if result.returncode == 77:
        testcluster("down", check=False)
        skip(result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "testcluster cannot run here")
    started = time.monotonic()
    try:
        assert result.returncode == 0, result.stderr
        check_pod_runs_on_a_host()
        check_exec()
        check_watch_and_delete_end_processes()
        check_indexed_job()
        check_job_failure_policies()
        check_no_exec_context()
        check_no_jobsets_without_crd()
        check_killed_host_is_not_ready()
        check_requests_recorded()
    finally:
        keep_artefacts("")
        check_nothing_left()
    # The JobSet CRD is a flag of the server: a cluster of its own (it comes up in seconds).
    result = testcluster("up", "2", "--kubernetes", "--kube-jobset-crd", check=False)
    try:
        assert result.returncode == 0, result.stderr
        check_jobset_crd()
        check_jobset_validation_and_status()
        check_requests_recorded()
    finally:
        keep_artefacts("jobset-")
        check_nothing_left()
    print(f"passed in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
