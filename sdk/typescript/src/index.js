// @sandboxd/sdk: the sandboxd API from JavaScript and TypeScript (Node 18+
// and browsers, through fetch). docs/sdk-typescript.md.
export { Sandboxd, Sandboxes, Executions, ApiKeys, Snapshots } from './client.js';
export { Sandbox, Files, Processes, Process } from './sandbox.js';
export { ROUTES, HttpClient } from './http.js';
export * from './errors.js';
