// A second, independent client of `videogen mcp`: the official TypeScript SDK, as hosts use it.
//
// node client.mjs stdio PYTHON LEDGER     (starts `PYTHON -m videogen_async mcp` itself)
// node client.mjs http URL                (VIDEOGEN_MCP_TOKEN: the bearer token to send)
//
// Every request keeps the SDK's default timeout (60 s, as in the hosts built on it). It lists
// the tools, creates a video (answering the consent asked through elicitation), waits for it
// with repeated wait_for_video calls, and prints one JSON line of what it saw; any error (a
// timeout, a structuredContent the SDK finds off its outputSchema) exits non-zero.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ElicitRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [mode, target, ledger] = process.argv.slice(2);
const transport =
  mode === "stdio"
    ? new StdioClientTransport({
        command: target,
        args: ["-m", "videogen_async", "mcp", "--ledger", ledger],
        env: process.env,
        stderr: "inherit",
      })
    : new StreamableHTTPClientTransport(new URL(target), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.VIDEOGEN_MCP_TOKEN}` } },
      });

const client = new Client({ name: "videogen-ts-test", version: "0" }, { capabilities: { elicitation: {} } });
const asked = [];
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  asked.push(request.params.message);
  return { action: "accept", content: {} };
});
await client.connect(transport);

const tools = (await client.listTools()).tools.map((tool) => ({
  name: tool.name,
  title: tool.title,
  annotations: tool.annotations,
  inputRequired: tool.inputSchema.required ?? [],
  outputSchema: tool.outputSchema?.type ?? null,
}));
const key = `ts-${mode}`;
const created = await client.callTool({ name: "create_video", arguments: { prompt: "a fox, from TypeScript", key } });
const started = Date.now();
const waits = [];
let entry = created.structuredContent;
while (!entry.done) {
  const before = Date.now();
  const answer = await client.callTool({ name: "wait_for_video", arguments: { key } });
  entry = answer.structuredContent;
  waits.push({ seconds: (Date.now() - before) / 1000, done: entry.done, text: answer.content[0].text });
}
await client.close();
const result = {
  protocol: client.getServerVersion() && transport.protocolVersion,
  tools,
  asked,
  created: created.structuredContent,
  waits,
  entry,
  seconds: (Date.now() - started) / 1000,
};
process.stdout.write(JSON.stringify(result) + "\n");
