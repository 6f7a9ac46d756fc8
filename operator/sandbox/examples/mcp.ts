// An example agent on the Model Context Protocol SDK: an MCP client, watched by the sandbox, calls
// the `lookup` tool of an MCP server and reports what it found. The server runs in this process on
// an in-memory transport; a real agent would connect to its servers over stdio or HTTP instead.
//
// In a project the imports are "@agent-watchdog/sandbox" and "@agent-watchdog/sandbox/mcp".
import { appendFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { z } from "zod";
import { runAgent } from "../index.ts";
import { watchdogClient } from "../adapters/mcp.ts";

function lookupServer(): McpServer {
  const server = new McpServer({ name: "facts", version: "1.0.0" });
  server.registerTool(
    "lookup",
    { description: "Looks up a fact about a topic", inputSchema: { topic: z.string() }, outputSchema: { fact: z.string() } },
    ({ topic }) => {
      // Runs only when the request is really sent: a replayed call does not reach the server.
      if (process.env.SIDE_EFFECTS_FILE) appendFileSync(process.env.SIDE_EFFECTS_FILE, `lookup ${topic}\n`);
      const result = { fact: "a fact about " + topic };
      return { content: [{ type: "text", text: JSON.stringify(result) }], structuredContent: result };
    },
  );
  return server;
}

await runAgent(async (sandbox) => {
  const topic = sandbox.goal ?? "the weather";
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const server = lookupServer();
  await server.connect(serverSide);
  // Watch the client before connecting it, so it can declare elicitation for approvals.
  const client = watchdogClient(sandbox, new Client({ name: "example-agent", version: "1.0.0" }), { idempotent: ["lookup"] });
  await client.connect(clientSide);
  try {
    // MCP has no model: this fixed plan stands in for one. A real agent would hand the tools of
    // `await client.listTools()` to its model and call what the model asks for.
    const plan = [{ name: "lookup", arguments: { topic } }] as const;
    const facts: string[] = [];
    for (const step of plan) {
      const result = await client.callTool(step);
      const { fact } = (result.structuredContent ?? {}) as { fact?: string };
      facts.push(result.isError ? `(${step.name} failed)` : (fact ?? "(no fact)"));
    }
    // MCP has no final-text concept, so the agent reports its answer itself.
    await sandbox.say(`Here is what I found: ${facts.join("; ")}.`);
  } finally {
    await client.close();
    await server.close();
  }
});
