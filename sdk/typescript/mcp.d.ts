// Types of @sandboxd/sdk/mcp: the MCP server (docs/mcp.md).
import type { Sandboxd } from './index.js';

export interface McpTool {
  name: string;
  description: string;
  inputSchema: { type: 'object'; properties: Record<string, unknown>; required: string[]; additionalProperties: false };
}
export declare const TOOLS: McpTool[];
export declare function checkArgs(tool: McpTool, args: unknown): string[];
export declare class McpServer {
  constructor(options: { client?: Sandboxd; send: (message: object) => void; keep?: boolean; log?: (line: string) => void });
  handle(message: unknown): Promise<void>;
  close(): Promise<void>;
}
export declare function serveStdio(options?: { client?: Sandboxd; keep?: boolean }): Promise<McpServer>;
