// A scripted model behind an OpenAI-compatible chat completions API, for agents whose model
// is configured by URL (Pi's custom providers). No model API is reachable here, so it plays
// one: each request gets the next tool call of the script (counted by the tool results the
// conversation already holds), and once the script is done, a reply quoting every tool
// result it was given. Streams (SSE) when asked to, as Pi asks.
//
//     node scripted_model.mjs PORT SCRIPT.json
//
// SCRIPT.json: [{"name": "mcp", "arguments": {...}}, ...]. Listens on 127.0.0.1 only (inside
// a sandbox: its own loopback, which NO_PROXY keeps off the proxy) and prints
// `listening PORT` once ready.
import { createServer } from "node:http";
import { readFileSync } from "node:fs";

const [port, scriptPath] = process.argv.slice(2);
const script = JSON.parse(readFileSync(scriptPath, "utf8"));

function reply(body) {
  const messages = body.messages ?? [];
  const results = messages.filter((m) => m.role === "tool");
  const step = script[results.length];
  if (step) {
    const args = typeof step.arguments === "string" ? step.arguments : JSON.stringify(step.arguments);
    return { tool_calls: [{ index: 0, id: `call_${results.length + 1}`, type: "function", function: { name: step.name, arguments: args } }] };
  }
  const text = (c) => (typeof c === "string" ? c : (c ?? []).map((p) => p.text ?? "").join(""));
  return { content: results.map((m) => `saw: ${text(m.content)}`).join("\n") || "nothing to report" };
}

createServer((req, res) => {
  let raw = "";
  req.on("data", (d) => (raw += d));
  req.on("end", () => {
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404, { "content-type": "application/json" }).end('{"error":{"message":"not found"}}');
      return;
    }
    const body = JSON.parse(raw || "{}");
    const out = reply(body);
    const finish = out.tool_calls ? "tool_calls" : "stop";
    const base = { id: "scripted", created: Math.floor(Date.now() / 1000), model: body.model ?? "scripted" };
    process.stderr.write(`request ${body.messages?.length ?? 0} messages -> ${finish}\n`);
    if (!body.stream) {
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ...base, object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: out.content ?? null, tool_calls: out.tool_calls }, finish_reason: finish }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } }));
      return;
    }
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    const chunk = (delta, finish_reason = null, extra = {}) =>
      res.write(`data: ${JSON.stringify({ ...base, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason }], ...extra })}\n\n`);
    chunk({ role: "assistant", ...out });
    chunk({}, finish, { usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    res.end("data: [DONE]\n\n");
  });
}).listen(Number(port), "127.0.0.1", () => console.log(`listening ${port}`));
