#!/usr/bin/python3
"""Probe: how a torch TCPStore client behaves when the server is not listening yet.

Starts a server process (it imports torch first, so it listens ~1-2 s later) and connects a
client at once; prints when the server began creating the store, when it was up (the server
returns once the client joined) and when the client connected. With Debian's torch 1.13 the
client connects on a whole second (2.0 s here) although the server listened earlier: a refused
connect is retried once per second. This is why an unmodified DDP script's rendezvous is slower
under dtrain (rank 0 of the script opens the store) than under torchrun (its agent's store is
already listening); see docs/performance.md.

  /usr/bin/python3 scripts/bench/tcpstore_retry_probe.py
"""
import socket, subprocess, sys, time
from datetime import timedelta
import torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
t0 = time.time()
server = subprocess.Popen([sys.executable, "-c",
  "import time,sys;from datetime import timedelta;import torch.distributed as d;"
  "print('server creating at %%.3f'%%(time.time()-%f),flush=True);st=d.TCPStore('127.0.0.1',%d,2,True,timedelta(seconds=30));print('server up at %%.3f'%%(time.time()-%f),flush=True);st.set('x','1');time.sleep(3)" % (t0, port, t0)])
client = dist.TCPStore("127.0.0.1", port, 2, False, timedelta(seconds=30))
client.get("x")
print("client connected at %.3f" % (time.time() - t0))
server.wait()
