// The little of node's API client.test.mjs uses, for tsc (no @types/node).
declare module 'node:test' {
  export function test(name: string, fn: () => Promise<void> | void): void;
}
declare module 'node:assert/strict' {
  const assert: {
    (v: unknown, msg?: string): asserts v;
    ok(v: unknown, msg?: string): asserts v;
    equal(a: unknown, b: unknown, msg?: string): void;
    deepEqual(a: unknown, b: unknown, msg?: string): void;
    match(s: string, re: RegExp, msg?: string): void;
  };
  export default assert;
}
declare const process: { env: Record<string, string | undefined> };
