// The acceptance walk through MCP with the official TypeScript SDK
// (`@modelcontextprotocol/sdk` on npm), unchanged: the same path as mcp_walk.py.
//
//     node mcp_walk.mjs URL PHASE --sdk PREFIX [--token-env VAR] [--parent NAME]
//
// PREFIX is the npm prefix holding node_modules/@modelcontextprotocol/sdk (the script may be
// staged where no node_modules folder is above it). From the host the token comes from the
// environment variable VAR (never argv); through the door (http://openshell.local/mcp inside
// a sandbox) there is none. PHASE `first` runs up to the refusal for a limit; the caller then
// raises the grant's limit (no policy change) and runs PHASE `after_raise`. Each phase checks
// what it sees (exit 1 with the reason) and prints one JSON object of what it found.

import { createRequire } from "node:module";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { parseArgs } from "node:util";

const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: { sdk: { type: "string" }, "token-env": { type: "string" }, parent: { type: "string" } },
});
const [url, phase] = positionals;
if (!url || !["first", "after_raise"].includes(phase) || !opts.sdk) {
  console.error("usage: node mcp_walk.mjs URL first|after_raise --sdk PREFIX [--token-env VAR] [--parent NAME]");
  process.exit(2);
}
const require = createRequire(join(opts.sdk, "package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const TOOLS = [
  "create_sandbox", "exec", "get_file", "list_children", "get_sandbox", "stop_sandbox", "delete_sandbox",
  "update_child_policy", "get_grant", "check_policy",
];

// Wider than any parent in the tests: network access to a host nobody granted.
const WIDER = `version: 1
filesystem_policy:
  read_only: [/usr, /lib, /proc, /dev/urandom, /etc]
  read_write: [/tmp]
network_policies:
  anywhere:
    endpoints:
      - host: example.com
        port: 443
    binaries:
      - path: /usr/bin/curl
`;

class Failed extends Error {}

function check(cond, why) {
  if (!cond) throw new Failed(why);
}

const show = (v) => JSON.stringify(v);
const parent = opts.parent;
const withParent = (args) => (parent ? { ...args, parent } : args);
const own = () => (parent ? { sandbox: parent } : {});

async function call(client, name, args, onprogress) {
  const r = await client.callTool({ name, arguments: args }, undefined, onprogress ? { onprogress } : undefined);
  return [r.isError === true, r.structuredContent];
}

// get_file, waiting while the child has not written the file yet (READY comes first; it renames
// each file into place, so one that exists is whole).
async function readFile(client, sandbox, path) {
  let r;
  for (let i = 0; i < 100; i++) {
    r = await call(client, "get_file", { sandbox, path });
    if (!(r[0] && r[1].code === "NOT_FOUND")) return r;
    await new Promise((done) => setTimeout(done, 100));
  }
  return r;
}

async function first(client, found) {
  const { tools } = await client.listTools();
  const names = tools.map((t) => t.name);
  check(TOOLS.every((t) => names.includes(t)), `tools listed: ${names}`);
  for (const t of tools) {
    check(t.outputSchema, `${t.name} has an output schema`);
    check(t.annotations, `${t.name} has annotations`);
  }
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  check(byName.get_grant.annotations.readOnlyHint === true, "get_grant is read-only");
  check(byName.get_file.annotations.readOnlyHint === true, "get_file is read-only");
  check(byName.delete_sandbox.annotations.destructiveHint === true, "delete_sandbox is destructive");
  found.tools = names.sort();

  let [err, grant] = await call(client, "get_grant", own());
  check(!err, `get_grant: ${show(grant)}`);
  found.grant = grant;

  let [, verdict] = await call(client, "check_policy", { candidate: WIDER, ...(parent ? { parent } : {}) });
  check(verdict.verdict === "exceeds" && verdict.counterexample, `check_policy: ${show(verdict)}`);
  found.check_policy = verdict;

  const progress = [];
  const tool = withParent({ name: "walk-tool", kind: "tool", command: ["sleep", "600"], request_id: "walk-1" });
  let created;
  [err, created] = await call(client, "create_sandbox", tool, (p) => progress.push(p.message));
  check(!err && created.sandbox.phase === "READY", `create_sandbox: ${show(created)}`);
  check(created.replayed === false, `first create is not a replay: ${show(created)}`);
  found.created = created.sandbox;
  found.progress = progress;

  let again;
  [err, again] = await call(client, "create_sandbox", tool);
  check(!err && again.replayed === true, `repeat request_id: ${show(again)}`);
  check(again.sandbox.id === created.sandbox.id, "the repeat returns the first child");

  let toolFile;
  [err, toolFile] = await call(client, "get_file", { sandbox: "walk-tool", path: "x" });
  check(err && toolFile.code === "NOT_ALLOWED", `get_file of a tool child: ${show(toolFile)}`);

  // An agent child given a secret through env writes it; the parent reads it back.
  const secret = "walk-" + randomBytes(16).toString("hex");
  const script = 'printf "%s" "$WALK_SECRET" > .s && mv .s secret.txt; ' +
    'printf "\\377\\376\\000x" > .b && mv .b blob.bin; exec sleep 600';
  const agent = withParent({
    name: "walk-agent", kind: "agent", command: ["sh", "-c", script], env: [{ name: "WALK_SECRET", value: secret }],
    request_id: "walk-agent",
  });
  let made;
  [err, made] = await call(client, "create_sandbox", agent);
  check(!err && made.sandbox.phase === "READY", `agent child: ${show(made)}`);
  found.secret = secret;
  let text;
  [err, text] = await readFile(client, "walk-agent", "secret.txt");
  check(!err && text.encoding === "utf-8" && text.content === secret, `get_file text: ${show(text)}`);
  found.file = text;
  let blob;
  [err, blob] = await readFile(client, "walk-agent", "blob.bin");
  check(!err && blob.encoding === "base64", `get_file binary: ${show(blob)}`);
  check(Buffer.from(blob.content, "base64").equals(Buffer.from([0xff, 0xfe, 0x00, 0x78])), `bytes: ${show(blob)}`);
  let outside;
  [err, outside] = await call(client, "get_file", { sandbox: "walk-agent", path: "../../../etc/passwd" });
  check(err && ["INVALID_ARGUMENT", "NOT_ALLOWED"].includes(outside.code), `outside the child: ${show(outside)}`);
  let owned;
  [err, owned] = await call(client, "create_sandbox", { ...agent, name: "walk-home", request_id: "walk-home", env: [{ name: "HOME", value: secret }] });
  check(err && owned.code === "INVALID_ARGUMENT" && owned.details.field === "env", `env HOME: ${show(owned)}`);
  check(!show(owned).includes(secret), `the refusal shows no value: ${show(owned)}`);

  let ran;
  [err, ran] = await call(client, "exec", {
    sandbox: "walk-tool", command: ["sh", "-c", "cat; echo done >&2"], stdin: "hello from mcp",
  });
  check(!err && ran.exit_code === 0 && ran.stdout === "hello from mcp", `exec: ${show(ran)}`);
  check(ran.stderr.trim() === "done", `exec stderr: ${show(ran)}`);
  found.exec = ran;

  let refused;
  [err, refused] = await call(client, "create_sandbox",
    withParent({ name: "walk-wide", kind: "agent", command: ["sleep", "600"], policy: WIDER }));
  check(err && refused.code === "POLICY_EXCEEDS_PARENT", `wider policy: ${show(refused)}`);
  check(refused.details.counterexample, `a counterexample: ${show(refused)}`);
  found.wider = refused;

  let limited;
  [err, limited] = await call(client, "create_sandbox",
    withParent({ name: "walk-over", kind: "tool", command: ["sleep", "600"], request_id: "walk-2" }));
  check(err && limited.code === "LIMIT_REACHED", `over the limit: ${show(limited)}`);
  found.limit = limited;

  let listed;
  [err, listed] = await call(client, "list_children", own());
  check(!err && listed.sandboxes.some((s) => s.name === "walk-tool"), `list_children: ${show(listed)}`);

  let bad;
  [err, bad] = await call(client, "create_sandbox", withParent({ command: "not a list" }));
  check(err && bad.code === "INVALID_ARGUMENT" && bad.details.field === "command", `bad input: ${show(bad)}`);
}

async function afterRaise(client, found) {
  const over = withParent({ name: "walk-over", kind: "tool", command: ["sleep", "600"], request_id: "walk-2" });
  let [err, created] = await call(client, "create_sandbox", over);
  check(!err && created.sandbox.phase === "READY", `after the raise: ${show(created)}`);
  found.created = created.sandbox;
  let got;
  [err, got] = await call(client, "get_sandbox", { sandbox: "walk-over" });
  check(!err && got.sandbox.id === created.sandbox.id, `get_sandbox: ${show(got)}`);
  let stopped;
  [err, stopped] = await call(client, "stop_sandbox", { sandbox: "walk-over" });
  check(!err && show(stopped.stopped.map((s) => s.phase)) === '["STOPPED"]', `stop_sandbox: ${show(stopped)}`);
}

const headers = {};
if (opts["token-env"]) headers.Authorization = "Bearer " + process.env[opts["token-env"]];
const client = new Client({ name: "openshell-walk", version: "1.0.0" });
const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
const found = { ok: true, sdk: "typescript" };
try {
  await client.connect(transport);
  found.protocol = transport.protocolVersion ?? null;
  await (phase === "first" ? first : afterRaise)(client, found);
  await client.close();
  console.log(JSON.stringify(found));
} catch (e) {
  console.log(JSON.stringify({ ok: false, error: e instanceof Failed ? e.message : String(e?.stack ?? e) }));
  process.exit(1);
}
