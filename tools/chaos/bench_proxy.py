# tools/chaos/bench_proxy.py — loopback throughput: direct vs through `dd-chaos proxy` (no faults).
# Usage: python3 tools/chaos/bench_proxy.py build/bin/dd-chaos   (pushes 1 GiB each way, twice)
import socket, threading, time, subprocess, json, sys
def sink_server():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
    def loop():
        while True:
            c, _ = s.accept()
            def drain(c=c):
                while c.recv(1 << 20): pass
                c.close()
            threading.Thread(target=drain, daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return s.getsockname()[1]
def push(port, total=1 << 30):
    c = socket.create_connection(("127.0.0.1", port)); buf = b"\0" * (1 << 20)
    t = time.time(); sent = 0
    while sent < total: c.sendall(buf); sent += len(buf)
    c.shutdown(socket.SHUT_WR); c.recv(1); c.close()
    return total / (time.time() - t) / 1e6
port = sink_server()
p = subprocess.Popen([sys.argv[1], "proxy", "--link", f"b=127.0.0.1:0->127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
ports = json.loads(p.stdout.readline()); lport = int(ports["links"]["b"].split(":")[1])
for i in range(2):
    d = push(port); x = push(lport)
    print(f"direct {d:.0f} MB/s  via proxy {x:.0f} MB/s  ratio {x/d:.2f}")
p.terminate()
