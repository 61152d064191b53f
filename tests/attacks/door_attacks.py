"""Attacks on the MCP door from inside a sandbox, as a prompt-injected agent would try them.

    door_attacks.py MODE [ARGS]

Every mode prints one JSON line. Only the standard library: run by /usr/bin/python3 (the
grant's program) or by ./py, a copy of the same interpreter in the working directory (another
program to the kernel). Raw HTTP through the proxy, so each byte sent is the test's own.
"""

import http.client
import json
import os
import shutil
import socket
import subprocess
import sys

PROXY = ("127.0.0.1", 3128)
DOOR = "http://openshell.local/mcp"
HEADERS = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
HERE = os.path.abspath(__file__)


def initialize_body(pad=0):
    info = {"name": "attack" + "x" * pad, "version": "1"}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": info}})


def connect():
    return http.client.HTTPConnection(*PROXY, timeout=60)


def post(conn, body, session=None):
    headers = dict(HEADERS)
    if session:
        headers["mcp-session-id"] = session
    conn.request("POST", DOOR, body, headers)
    r = conn.getresponse()
    text = r.read().decode(errors="replace")
    return {"status": r.status, "session": r.getheader("mcp-session-id"),
            "connection": r.getheader("connection"), "body": text, "message": message(text)}


def message(text):
    """The JSON-RPC message in a JSON or SSE body, else the body as JSON, else None."""
    for line in text.splitlines():
        if line.startswith("data:") and line[5:].strip():
            return json.loads(line[5:])
    try:
        return json.loads(text)
    except ValueError:
        return None


def initialize(conn):
    r = post(conn, initialize_body())
    assert r["status"] == 200 and r["session"], r
    post(conn, json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}), r["session"])
    return r["session"]


def create(conn, session, name, wait=False):
    call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "create_sandbox",
        "arguments": {"name": name, "kind": "tool", "command": ["sleep", "600"], "wait": wait}}}
    return post(conn, json.dumps(call), session)


def py():
    """./py: a copy of this interpreter, which the kernel reports as another program."""
    path = os.path.join(os.path.expanduser("~"), "py")
    if not os.path.exists(path):
        shutil.copy(os.path.realpath(sys.executable), path)
        os.chmod(path, 0o755)
    return path


def from_fd(fd):
    """An HTTP connection over a TCP socket received or inherited as descriptor `fd`."""
    conn = connect()
    conn.sock = socket.socket(fileno=fd)
    # The sender's timeout made the shared file non-blocking: wait the same way.
    conn.sock.settimeout(60)
    return conn


def emit(value):
    value["program"] = os.path.realpath("/proc/self/exe")
    print(json.dumps(value), flush=True)


def keepalive():
    """The grant's program creates twice over one kept-alive connection."""
    conn = connect()
    session = initialize(conn)
    first = create(conn, session, "ka-1")
    second = create(conn, session, "ka-2")
    emit({"results": [first, second], "same_socket": conn.sock is not None})


def scm(keep):
    """The grant's program opens and initializes, hands the socket to ./py by SCM_RIGHTS and
    lets go of it (or keeps its copy); ./py asks to create."""
    conn = connect()
    session = initialize(conn)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    child = subprocess.Popen([py(), HERE, "scm-receiver", session], pass_fds=[theirs.fileno()],
                             stdout=subprocess.PIPE, env=dict(os.environ, RECEIVER_FD=str(theirs.fileno())))
    theirs.close()
    socket.send_fds(mine, [b"x"], [conn.sock.fileno()])
    if not keep:
        conn.sock.close()
    out = child.communicate(timeout=120)[0].decode()
    print(out.strip().splitlines()[-1], flush=True)


def scm_receiver(session):
    unix = socket.socket(fileno=int(os.environ["RECEIVER_FD"]))
    _, fds, _, _ = socket.recv_fds(unix, 1, 1)
    emit({"result": create(from_fd(fds[0]), session, "by-scm")})


def fork_exec(keep):
    """The grant's program forks; the child execs ./py with the socket still open."""
    conn = connect()
    session = initialize(conn)
    fd = conn.sock.fileno()
    child = subprocess.Popen([py(), HERE, "inherited", session, str(fd)], pass_fds=[fd], stdout=subprocess.PIPE)
    if not keep:
        conn.sock.close()
    out = child.communicate(timeout=120)[0].decode()
    print(out.strip().splitlines()[-1], flush=True)


def inherited(session, fd):
    emit({"result": create(from_fd(int(fd)), session, "by-inheritance")})


def exec_in_place():
    """The grant's program execs ./py itself (same process) with the socket open."""
    conn = connect()
    session = initialize(conn)
    fd = conn.sock.fileno()
    os.set_inheritable(fd, True)
    os.execv(py(), [py(), HERE, "inherited", session, str(fd)])


def own():
    """./py on a connection of its own: the gateway refuses it, naming it."""
    out = subprocess.run([py(), HERE, "own-py"], stdout=subprocess.PIPE, timeout=120).stdout.decode()
    print(out.strip().splitlines()[-1], flush=True)


def own_py():
    conn = connect()
    session = initialize(conn)
    emit({"result": create(conn, session, "by-py")})


def tool(conn, session, name, arguments):
    call = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": name, "arguments": arguments}}
    return post(conn, json.dumps(call), session)


# Every tool but create_sandbox, with arguments the grant's program is answered for.
OTHER_TOOLS = [("get_grant", {}), ("list_children", {}), ("get_sandbox", {"sandbox": "tc"}),
               ("exec", {"sandbox": "tc", "command": ["echo", "hi"]}), ("stop_sandbox", {"sandbox": "tc"})]


def other_tools():
    """The grant's program makes the tool child tc and execs in it; ./py, on a connection of
    its own, calls every other tool on tc (each must be refused, naming ./py)."""
    conn = connect()
    session = initialize(conn)
    made = create(conn, session, "tc", wait=True)
    granted = tool(conn, session, "exec", {"sandbox": "tc", "command": ["echo", "hi"]})
    out = subprocess.run([py(), HERE, "other-tools-py"], stdout=subprocess.PIPE, timeout=300).stdout.decode()
    print(json.dumps({"created": made, "exec": granted, "py": json.loads(out.strip().splitlines()[-1])}), flush=True)


def other_tools_py():
    conn = connect()
    session = initialize(conn)
    emit({"results": {name: tool(conn, session, name, args) for name, args in OTHER_TOOLS}})


def steal():
    """./py takes the grant's program's socket with pidfd_getfd (the seccomp filter refuses)."""
    conn = connect()
    initialize(conn)
    thief = subprocess.run([py(), "-c", f"""
import ctypes, os, json
libc = ctypes.CDLL(None, use_errno=True)
pidfd = os.pidfd_open({os.getpid()})
r = libc.syscall(438, pidfd, {conn.sock.fileno()}, 0)
print(json.dumps({{"ret": r, "errno": ctypes.get_errno()}}))
"""], capture_output=True, timeout=60)
    emit({"thief": json.loads(thief.stdout.decode().strip() or "{}"), "stderr": thief.stderr.decode()})


def raw(request, tunnel=None):
    """Sends `request` (bytes) on a fresh connection, inside `CONNECT tunnel` if given; the
    status, headers and body."""
    s = socket.create_connection(PROXY, timeout=30)
    if tunnel:
        s.sendall(f"CONNECT {tunnel} HTTP/1.1\r\nHost: {tunnel}\r\n\r\n".encode())
        head = b""
        while not head.endswith(b"\r\n\r\n"):
            head += s.recv(1)
        if not head.startswith(b"HTTP/1.1 200"):
            return {"status": 0, "session": None, "body": "tunnel refused: " + head.decode(errors="replace")}
    s.sendall(request)
    r = read_response(s)
    s.close()
    return r


def read_response(s):
    """One response from socket `s`: its status, session, Connection header and body."""
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        lengths = [int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")]
        if lengths and len(body) >= lengths[0]:
            break
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    headers = {l.split(":", 1)[0].lower(): l.split(":", 1)[1].strip() for l in lines[1:] if ":" in l}
    status = int(lines[0].split(" ")[1]) if " " in lines[0] else 0
    return {"status": status, "session": headers.get("mcp-session-id"), "connection": headers.get("connection"),
            "body": body.decode(errors="replace")}


def names():
    """Every loose spelling of the door and of policy.local, raw, with an initialize body."""
    body = initialize_body().encode()
    post_to = lambda url, host="x": (f"POST {url} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                                     f"Accept: application/json, text/event-stream\r\nConnection: close\r\n"
                                     f"Content-Length: {len(body)}\r\n\r\n").encode() + body
    get = lambda url, host="x": f"GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
    connect_to = lambda target: f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
    cases = {
        "port_8080": post_to("http://openshell.local:8080/mcp"),
        "upper_case": post_to("http://OPENSHELL.LOCAL/mcp"),
        "trailing_dot": post_to("http://openshell.local./mcp"),
        "encoded_path": post_to("http://openshell.local/%6dcp"),
        "dot_segment": post_to("http://openshell.local/x/../mcp"),
        "trailing_slash": post_to("http://openshell.local/mcp/"),
        "query": post_to("http://openshell.local/mcp?x=1"),
        "connect_443": connect_to("openshell.local:443"),
        "connect_upper_case": connect_to("OPENSHELL.LOCAL:80"),
        "policy_port_8080": get("http://policy.local:8080/v1/policy/current"),
        "policy_https": get("https://policy.local/v1/policy/current"),
        "policy_upper_case": get("http://POLICY.LOCAL/v1/policy/current"),
        "policy_trailing_dot": get("http://policy.local./v1/policy/current"),
        "policy_encoded_path": get("http://policy.local/v1/%70olicy/current"),
        "policy_connect": connect_to("policy.local:443"),
        "exact": post_to(DOOR),
        "exact_port_80": post_to("http://openshell.local:80/mcp"),
        "policy_exact": get("http://policy.local/v1/policy/current"),
    }
    out = {name: raw(request) for name, request in cases.items()}
    # Inside `CONNECT openshell.local:80` (how Node's fetch reaches any http:// URL).
    door = "openshell.local:80"
    out["tunnel_upper_case_host"] = raw(post_to("/mcp", "OPENSHELL.LOCAL"), door)
    out["tunnel_encoded_path"] = raw(post_to("/%6dcp", "openshell.local"), door)
    out["tunnel_exact"] = raw(post_to("/mcp", "openshell.local"), door)
    out["policy_tunnel_exact"] = raw(get("/v1/policy/current", "policy.local"), "policy.local:80")
    emit({"cases": out})


def big(limit):
    """Initialize bodies around the gateway's limit, and one of 1 MiB."""
    limit = int(limit)
    sized = lambda n: initialize_body(n - len(initialize_body()))
    out = {}
    for name, text in [("mib", sized(1 << 20)), ("over", sized(limit + 1)), ("at", sized(limit))]:
        assert name != "at" or len(text) == limit
        out[name] = post(connect(), text)
    emit(out)


MODES = {
    "keepalive": keepalive, "scm": lambda: scm(False), "scm-both": lambda: scm(True),
    "scm-receiver": scm_receiver, "fork-exec": lambda: fork_exec(False), "fork-exec-both": lambda: fork_exec(True),
    "inherited": inherited, "exec": exec_in_place, "own": own, "own-py": own_py, "steal": steal, "names": names, "big": big,
    "other-tools": other_tools, "other-tools-py": other_tools_py,
}

if __name__ == "__main__":
    MODES[sys.argv[1]](*sys.argv[2:])
