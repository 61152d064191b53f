"""A one-hop HTTP forwarder that adds `Authorization: Bearer $TOKEN_ENV` to every request,
for clients that cannot send headers of their own (the MCP conformance suite). Everything
else (Host, Origin, body, the streamed response) passes unchanged.

    auth_hop.py UPSTREAM TOKEN_ENV      # prints its port, serves until killed
"""

import http.server
import os
import sys

import httpx2

UPSTREAM = sys.argv[1].rstrip("/")
TOKEN = os.environ[sys.argv[2]]
HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}
client = httpx2.Client(timeout=httpx2.Timeout(60.0, read=300.0))


class Hop(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def forward(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else None
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in HOP | {"content-length"}]
        headers.append(("authorization", "Bearer " + TOKEN))
        req = client.build_request(self.command, UPSTREAM + self.path, headers=headers, content=body)
        resp = client.send(req, stream=True)
        try:
            self.send_response(resp.status_code)
            for k, v in resp.headers.multi_items():
                if k.lower() not in HOP | {"content-length"}:
                    self.send_header(k, v)
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for chunk in resp.iter_raw():
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            except (BrokenPipeError, ConnectionResetError):
                pass
        finally:
            resp.close()

    do_GET = do_POST = do_DELETE = forward

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hop)
server.daemon_threads = True
print(server.server_address[1], flush=True)
server.serve_forever()
