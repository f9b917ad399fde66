#!/usr/bin/python3
"""An emulated Kubernetes API server for dtrain's tests (issue 31): Pods, batch/v1 Jobs,
Services, Nodes, Namespaces and (with --jobset-crd) JobSets over HTTPS, with list/watch, selectors, access reviews and
pods/exec, and a node emulator that runs each pod's containers on the testcluster hosts.

  apiserver.py --listen 10.77.0.2:6443 --cert C --key K --users USERS.json --state DIR
               [--cluster-env cluster.env] [--gpus-per-node 8] [--namespace dtrain-test]...

scripts/testcluster.sh `up N --kubernetes` starts it in the control namespace; see
tests/k8s/README.md. Standard library only (Debian's python3).
"""

import argparse
import os
import signal
import ssl
import sys
import threading
from http.server import ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import k8s_auth  # noqa: E402
import k8s_discovery  # noqa: E402
from k8s_api import Api  # noqa: E402
from k8s_exec import ExecServer  # noqa: E402
from k8s_handler import Handler, RequestLog  # noqa: E402
from k8s_jobs import JobController  # noqa: E402
from k8s_jobsets import JobSetController  # noqa: E402
from k8s_nodes import Host, NodeEmulator  # noqa: E402
from k8s_store import Store  # noqa: E402


def read_cluster_env(path):
    values = {}
    with open(path) as handle:
        for line in handle:
            key, _, value = line.rstrip("\n").partition("=")
            values[key] = value
    return values


def hosts_from_env(path, gpus):
    if not path:
        return []
    env = read_cluster_env(path)
    count = int(env.get("DTRAIN_TESTCLUSTER_HOSTS", "0"))
    return [Host(env[f"HOST_{i}_NAME"], env[f"HOST_{i}_IP"], env[f"HOST_{i}_DIR"], gpus)
            for i in range(1, count + 1)]


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:6443", help="IP:PORT")
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--users", required=True, help='JSON {"tokens": {TOKEN: USER}}')
    parser.add_argument("--state", required=True, help="directory: requests.jsonl, logs/, nodes/")
    parser.add_argument("--cluster-env", help="testcluster's cluster.env: the hosts become nodes")
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--namespace", action="append", default=[])
    parser.add_argument("--jobset-crd", action="store_true",
                        help="serve the JobSet CRD's resource (jobsets.jobset.x-k8s.io): discovery lists it, "
                             "JobSets are stored and run (k8s_jobsets.py)")
    return parser.parse_args(argv)


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A client that leaves during the TLS handshake (a port probe) is not an error.
        error = sys.exc_info()[1]
        if not isinstance(error, (OSError, ssl.SSLError)):
            super().handle_error(request, client_address)


def main(argv):
    args = parse_args(argv)
    if args.jobset_crd:
        k8s_discovery.install_jobset_crd()
    os.makedirs(os.path.join(args.state, "nodes"), exist_ok=True)
    store = Store()
    for namespace in ["default", "kube-system"] + (args.namespace or ["dtrain-test"]):
        store.create("namespaces", "", {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": namespace}, "spec": {"finalizers": ["kubernetes"]},
                                        "status": {"phase": "Active"}})
    nodes = NodeEmulator(store, hosts_from_env(args.cluster_env, args.gpus_per_node), args.state)
    jobs = JobController(store, nodes)
    jobsets = JobSetController(store, jobs)  # idle unless --jobset-crd serves jobsets
    host, _, port = args.listen.rpartition(":")
    server = Server((host, int(port)), Handler)
    server.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.tls.load_cert_chain(args.cert, args.key)
    server.tls.set_alpn_protocols(["http/1.1"])
    server.tokens = k8s_auth.load_tokens(args.users)
    server.log = RequestLog(os.path.join(args.state, "requests.jsonl"))
    server.api = Api(store, nodes, jobs, jobsets, ExecServer(nodes))
    threading.Thread(target=nodes.run_forever, name="node-loop", daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    print(f"apiserver: listening on https://{args.listen} with {len(nodes.hosts)} nodes", flush=True)
    server.serve_forever(poll_interval=0.2)
    nodes.stopping.set()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
